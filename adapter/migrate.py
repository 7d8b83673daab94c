"""`prescaler migrate`: the HPA change that gives a HorizontalPodPrescaler's behaviour, printed, never applied.

    prescaler migrate --hpp examples/seed/horizontalpodprescaler.yaml
    prescaler migrate --hpp hpp.yaml --hpa my-hpa.yaml          # start from your HPA manifest
    prescaler migrate --hpp hpp.yaml --kubeconfig ~/.kube/config  # read the HPA from the cluster (GET only)

For each HPP in the file it prints the External metric entry, a ready `kubectl patch` command and the
full HPA manifest with the entry in place. It only ever reads: nothing is created, patched or applied.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from adapter.store.hpp import (
    KIND_HPA,
    KIND_HPP,
    HPPError,
    Prescaler,
    check_hpa,
    external_entry,
    parse_hpp,
    patched_manifest,
)
from adapter.yamlload import SafeLoader


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="print the HPA change that replaces a HorizontalPodPrescaler (never applies it)",
        description="Print, for each HorizontalPodPrescaler in FILE, the External metric entry its HPA needs, as "
        "a kubectl patch command and as a full manifest. Nothing is applied.",
    )
    parser.add_argument("--hpp", required=True, metavar="FILE", help="YAML with HorizontalPodPrescaler documents")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--hpa", metavar="FILE", help="YAML with the current HPA(s), to patch from them")
    source.add_argument("--kubeconfig", metavar="PATH", help="read the current HPA from the cluster (GET only)")
    parser.add_argument("--context", default=None, help="kubeconfig context (with --kubeconfig)")
    parser.set_defaults(func=run)


def _load(path: str) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
        return [d for d in yaml.load_all(text, Loader=SafeLoader) if isinstance(d, dict)]
    except OSError as exc:
        raise HPPError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise HPPError(f"{path}: invalid YAML: {exc}") from None


def _hpa_from_docs(docs: list[dict[str, Any]], hpp: Prescaler) -> dict[str, Any] | None:
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        if (
            doc.get("kind") == KIND_HPA
            and meta.get("name") == hpp.hpa_name
            and (meta.get("namespace") or hpp.namespace) == hpp.namespace
        ):
            return doc
    return None


def _hpa_from_cluster(api_client: Any, hpp: Prescaler) -> dict[str, Any] | None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        response: Any = client.AutoscalingV2Api(api_client).read_namespaced_horizontal_pod_autoscaler(
            hpp.hpa_name, hpp.namespace, _preload_content=False, _request_timeout=15
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise HPPError(f"reading HPA {hpp.namespace}/{hpp.hpa_name}: API error {exc.status} {exc.reason}") from None
    doc: dict[str, Any] = json.loads(response.data)
    doc.setdefault("apiVersion", "autoscaling/v2")
    doc.setdefault("kind", KIND_HPA)
    return doc


def render(hpp: Prescaler, hpa: dict[str, Any] | None, hpa_source: str | None, out: TextIO) -> None:
    target = f"HPA {hpp.namespace}/{hpp.hpa_name}"
    out.write(f"# {KIND_HPP} {hpp.namespace}/{hpp.name} -> {target}\n")
    out.write("# prescaler never changes an HPA: review and apply one of the two forms below yourself.\n")
    out.write("# The External metric entry (replicas = ceil(value / averageValue), the seed's rule):\n")
    for metric in hpp.metrics:
        out.write(_comment(yaml.safe_dump([external_entry(hpp, metric)], sort_keys=False)))
    check = check_hpa(hpp, hpa)
    if hpa is not None and check.configured:
        out.write(f"# {target} ({hpa_source}) already has it: nothing to change.\n")
        return
    if hpa is None and hpa_source is not None:
        out.write(f"# {target} was not found in {hpa_source}: create it from the manifest below.\n")
    elif hpa is None:
        out.write(
            f"# Without --hpa or --kubeconfig the patch appends to {target}'s spec.metrics; if that HPA "
            "has no spec.metrics, pass it with --hpa so its implicit CPU metric is kept.\n"
        )
    out.write("\n# 1. Patch the existing HPA:\n")
    out.write(check.command + "\n")
    out.write("\n# 2. Or the full manifest (kubectl apply -f -):\n")
    if hpa is None:
        out.write("# scaleTargetRef, minReplicas and maxReplicas are placeholders: set them to your workload's.\n")
    out.write("---\n" + yaml.safe_dump(patched_manifest(hpp, hpa), sort_keys=False))


def _comment(text: str) -> str:
    return "".join(f"#   {line}\n" for line in text.splitlines())


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        docs = _load(args.hpp)
        hpps = [parse_hpp(d) for d in docs if d.get("kind") == KIND_HPP]
        if not hpps:
            raise HPPError(f"{args.hpp}: no {KIND_HPP} document")
        hpa_docs = _load(args.hpa) if args.hpa else []
        api_client = None
        if args.kubeconfig:
            from adapter.store.kube import load_api_client

            api_client = load_api_client(args.kubeconfig, args.context)
        for index, hpp in enumerate(hpps):
            if index:
                out.write("\n")
            if api_client is not None:
                hpa, source = _hpa_from_cluster(api_client, hpp), "the cluster"
            elif args.hpa:
                hpa, source = _hpa_from_docs(hpa_docs, hpp), args.hpa
            else:
                hpa, source = None, None
            render(hpp, hpa, source, out)
    except (HPPError, RuntimeError) as exc:  # RuntimeError: KubeConfigError
        print(f"prescaler migrate: {exc}", file=sys.stderr)
        return 2
    return 0
