"""Upstream passthrough settings: command-line flags, validation, and the TLS context built from them."""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_TIMEOUT = 5.0
DEFAULT_DISCOVERY_INTERVAL = 30.0
DEFAULT_MAX_CONNECTIONS = 32
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024


class UpstreamConfigError(ValueError):
    """A bad --upstream-* flag; the message names the flag."""


@dataclass(frozen=True)
class UpstreamConfig:
    url: str  # https://keda-operator-metrics-apiserver.keda.svc:443
    ca_file: str | None = None  # the upstream's serving CA (default: system trust store)
    token_file: str | None = None  # bearer token, re-read when the file changes (projected tokens)
    client_cert_file: str | None = None  # or a client certificate the upstream trusts
    client_key_file: str | None = None
    timeout: float = DEFAULT_TIMEOUT  # whole request: connect, wait for a pooled connection, read
    discovery_interval: float = DEFAULT_DISCOVERY_INTERVAL
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    insecure_skip_verify: bool = False  # tests and debugging only; logged loudly

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise UpstreamConfigError(
                f"--upstream-external-metrics-url: {self.url!r} is not an http(s) URL with a host"
            )
        if parts.query or parts.fragment:
            raise UpstreamConfigError("--upstream-external-metrics-url: must not carry a query or fragment")
        if not self.timeout > 0 or self.timeout > 60:
            raise UpstreamConfigError(f"--upstream-timeout: {self.timeout} must be in (0, 60] seconds")
        if not self.discovery_interval >= 1:
            raise UpstreamConfigError("--upstream-discovery-interval: must be at least 1 second")
        if self.max_connections < 1:
            raise UpstreamConfigError("--upstream-max-connections: must be at least 1")
        if self.max_response_bytes < 1024:
            raise UpstreamConfigError("--upstream-max-response-bytes: must be at least 1024")
        if bool(self.client_cert_file) != bool(self.client_key_file):
            raise UpstreamConfigError("--upstream-client-cert-file and --upstream-client-key-file go together")
        for flag, path in (
            ("--upstream-ca-file", self.ca_file),
            ("--upstream-token-file", self.token_file),
            ("--upstream-client-cert-file", self.client_cert_file),
            ("--upstream-client-key-file", self.client_key_file),
        ):
            if path and not Path(path).is_file():
                raise UpstreamConfigError(f"{flag}: {path} is not a readable file")

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/")

    def ssl_context(self) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.insecure_skip_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.client_cert_file and self.client_key_file:
                context.load_cert_chain(self.client_cert_file, self.client_key_file)
        except (ssl.SSLError, OSError) as exc:
            raise UpstreamConfigError(f"upstream TLS files: {exc}") from None
        return context


def add_upstream_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "upstream passthrough",
        "forward requests for metrics prescaler does not define to the adapter that held "
        "the external.metrics.k8s.io APIService before (KEDA, prometheus-adapter)",
    )
    group.add_argument(
        "--upstream-external-metrics-url",
        metavar="URL",
        default=None,
        help="base URL of the upstream adapter, e.g. https://keda-operator-metrics-apiserver.keda.svc",
    )
    group.add_argument(
        "--upstream-ca-file",
        metavar="FILE",
        default=None,
        help="CA bundle that signed the upstream's serving certificate",
    )
    group.add_argument(
        "--upstream-token-file",
        metavar="FILE",
        default=None,
        help="bearer token prescaler presents to the upstream (its own identity; re-read on change)",
    )
    group.add_argument(
        "--upstream-client-cert-file",
        metavar="FILE",
        default=None,
        help="client certificate prescaler presents to the upstream (instead of a token)",
    )
    group.add_argument(
        "--upstream-client-key-file", metavar="FILE", default=None, help="private key of --upstream-client-cert-file"
    )
    group.add_argument(
        "--upstream-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"deadline of one upstream request (default {DEFAULT_TIMEOUT:g})",
    )
    group.add_argument(
        "--upstream-discovery-interval",
        type=float,
        default=DEFAULT_DISCOVERY_INTERVAL,
        metavar="SECONDS",
        help="how often the upstream's metric names are refreshed",
    )
    group.add_argument(
        "--upstream-max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="connection pool limit towards the upstream",
    )
    group.add_argument(
        "--upstream-max-response-bytes",
        type=int,
        default=DEFAULT_MAX_RESPONSE_BYTES,
        help="larger upstream answers are refused with 503",
    )
    group.add_argument(
        "--upstream-insecure-skip-tls-verify",
        action="store_true",
        help="do not verify the upstream's certificate (debugging only)",
    )


def config_from_args(args: argparse.Namespace) -> UpstreamConfig | None:
    url = getattr(args, "upstream_external_metrics_url", None)
    if not url:
        return None
    return UpstreamConfig(
        url=url,
        ca_file=args.upstream_ca_file,
        token_file=args.upstream_token_file,
        client_cert_file=args.upstream_client_cert_file,
        client_key_file=args.upstream_client_key_file,
        timeout=args.upstream_timeout,
        discovery_interval=args.upstream_discovery_interval,
        max_connections=args.upstream_max_connections,
        max_response_bytes=args.upstream_max_response_bytes,
        insecure_skip_verify=args.upstream_insecure_skip_tls_verify,
    )
