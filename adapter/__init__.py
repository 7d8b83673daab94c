"""prescaler: a Kubernetes external-metrics API server that serves future-aware metric values.

Data flows one way: sources produce items -> expressions turn items into contributions ->
timelines merge them per (metric, target) -> the API serves values.
"""

__version__ = "0.1.0"
