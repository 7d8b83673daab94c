"""``prescaler certs``: a CA, a serving certificate for the adapter Service, and the APIService.

Writes into ``--out``: ``ca.crt``, ``ca.key`` (needed to re-issue), ``tls.crt``, ``tls.key`` and
``apiservice.yaml`` (APIService ``v1beta1.external.metrics.k8s.io`` with the CA as caBundle).
kube-aggregator dials ``<service>.<namespace>.svc`` (wire.md §7), which is among the SANs.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import sys
from typing import Any

import yaml

from adapter.serving.certs import make_ca, make_serving_cert

# RFC 1123 label: what Kubernetes accepts for Service and Namespace names.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def service_sans(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    return [
        f"{service}.{namespace}.svc",  # first: becomes the CN; the name the aggregator verifies
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def apiservice_manifest(service: str, namespace: str, ca_pem: bytes, port: int = 443) -> dict[str, Any]:
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
        "spec": {
            "service": {"name": service, "namespace": namespace, "port": port},
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "caBundle": base64.b64encode(ca_pem).decode("ascii"),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


def _write(path: str, data: bytes, private: bool = False) -> None:
    mode = 0o600 if private else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


def run_certs(args: argparse.Namespace) -> int:
    errors = []
    for flag, value in (("--service", args.service), ("--namespace", args.namespace)):
        if not _DNS_LABEL.match(value or ""):
            errors.append(f"{flag} {value!r} is not a valid DNS label (lowercase a-z, 0-9, '-', max 63)")
    if args.days <= 0:
        errors.append(f"--days must be positive, got {args.days}")
    if errors:
        for msg in errors:
            print(f"prescaler certs: {msg}", file=sys.stderr)
        return 2
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as exc:
        print(f"prescaler certs: cannot create {args.out}: {exc}", file=sys.stderr)
        return 1
    ca_pem, ca_key = make_ca(f"prescaler-ca@{args.namespace}/{args.service}", days=max(args.days, 3650))
    sans = service_sans(args.service, args.namespace, args.cluster_domain)
    tls_pem, tls_key = make_serving_cert(ca_pem, ca_key, sans, days=args.days)
    manifest = apiservice_manifest(args.service, args.namespace, ca_pem)
    files = {
        "ca.crt": (ca_pem, False),
        "ca.key": (ca_key, True),
        "tls.crt": (tls_pem, False),
        "tls.key": (tls_key, True),
        "apiservice.yaml": (yaml.safe_dump(manifest, sort_keys=False).encode(), False),
    }
    try:
        for name, (data, private) in files.items():
            _write(os.path.join(args.out, name), data, private)
    except OSError as exc:
        print(f"prescaler certs: cannot write into {args.out}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {', '.join(files)} to {args.out} (SANs: {', '.join(sans)})")
    return 0


def add_parsers(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "certs",
        help="create a CA, a serving certificate for the Service and the APIService manifest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--service", required=True, help="Service name of the adapter")
    parser.add_argument("--namespace", required=True, help="namespace of the Service")
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--days", type=int, default=365, help="serving certificate validity (days)")
    parser.add_argument("--cluster-domain", default="cluster.local", help="cluster DNS domain")
    parser.set_defaults(func=run_certs)
    return parser
