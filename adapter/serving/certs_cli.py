"""``prescaler certs``: a CA, a serving certificate for the adapter Service, and the APIService.

Writes into ``--out``: ``ca.crt``, ``ca.key`` (needed to re-issue), ``tls.crt``, ``tls.key`` and
``apiservice.yaml`` (APIService ``v1beta1.external.metrics.k8s.io`` with the CA as caBundle), then
prints the kubectl commands that install them; it never talks to a cluster itself.
kube-aggregator dials ``<service>.<namespace>.svc``, which is among the SANs.
This is the one certificate tool of the kustomize install; deploy/certs/gen-certs.sh only calls it.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shlex
import sys
from typing import Any

import yaml

from adapter.serving.certs import make_ca, make_serving_cert

# RFC 1123 label: what Kubernetes accepts for Service and Namespace names.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


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
    print(next_steps(args.service, args.namespace, args.out, ca_pem))
    return 0


def next_steps(service: str, namespace: str, out: str, ca_pem: bytes) -> str:
    """The commands that install the files (printed, never run: the user picks the cluster)."""
    ca_bundle = base64.b64encode(ca_pem).decode("ascii")
    q = shlex.quote
    return (
        "Install them (after `kubectl apply -k deploy/`; the pods wait for the Secret until then):\n\n"
        f"  kubectl -n {namespace} create secret generic {service}-tls \\\n"
        f"    --from-file=tls.crt={q(os.path.join(out, 'tls.crt'))} "
        f"--from-file=tls.key={q(os.path.join(out, 'tls.key'))} "
        f"--from-file=ca.crt={q(os.path.join(out, 'ca.crt'))} \\\n"
        "    --dry-run=client -o yaml | kubectl apply -f -\n"
        "  kubectl patch apiservice v1beta1.external.metrics.k8s.io --type=merge \\\n"
        f'    -p \'{{"spec":{{"caBundle":"{ca_bundle}"}}}}\'\n\n'
        f"Keep {os.path.join(out, 'ca.key')} out of the cluster and out of version control."
    )


def add_parsers(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "certs",
        help="create a CA, a serving certificate for the Service and the APIService manifest",
        description="Create a private CA, a serving certificate for <service>.<namespace>.svc and the "
        "APIService manifest with the CA as caBundle; print the kubectl commands that install "
        "them. Writes ca.crt, ca.key (keep it out of the cluster), tls.crt, tls.key and "
        "apiservice.yaml into --out. Nothing is sent to a cluster.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--service", default="prescaler", help="Service name of the adapter")
    parser.add_argument("--namespace", default="prescaler", help="namespace of the Service")
    parser.add_argument("--out", default="./prescaler-certs", help="output directory (created if missing)")
    parser.add_argument("--days", type=int, default=365, help="serving certificate validity in days")
    parser.add_argument("--cluster-domain", default="cluster.local", help="cluster DNS domain")
    parser.set_defaults(func=run_certs)
    return parser
