"""The value pipeline as pure functions, shared by the server, `preview` and `simulate`.

    objects   (objects.py)        documents -> validated state; metric-name conflicts resolved
    items x entries (contributions.py) -> contributions per (metric, namespace, resource)
    contributions   (publish.py)  -> Published: immutable timelines, partitioned by (metric, namespace)
    Published       (query.py)    -> typed answers: Values, MetricNotFound, SourceOnHold
    object state    (status.py)   -> status dictionaries

Nothing here touches Prometheus gauges, the event loop or the network; the engine
(adapter.engine) calls these functions and owns the side effects. See docs/architecture.md.
"""
