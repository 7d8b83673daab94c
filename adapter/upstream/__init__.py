"""Passthrough to an upstream external-metrics adapter (KEDA's metrics server, prometheus-adapter).

A cluster has one ``v1beta1.external.metrics.k8s.io`` APIService. When prescaler takes it over, every
value request for a metric prescaler does not define goes to the adapter that held it before, and
discovery lists both sets of names. See `adapter.upstream.passthrough` for the rules.
"""

from adapter.upstream.config import UpstreamConfig, UpstreamConfigError, add_upstream_flags, config_from_args
from adapter.upstream.passthrough import Passthrough

__all__ = ["Passthrough", "UpstreamConfig", "UpstreamConfigError", "add_upstream_flags", "config_from_args"]
