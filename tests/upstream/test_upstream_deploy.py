"""The upstream passthrough settings in the Helm chart and the kustomize component."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from adapter.cli import build_parser
from adapter.upstream import config_from_args
from tests.deploy.test_manifests import NAMESPACE, k8s_errors, key, kustomize, load_all
from tests.deploy.test_manifests_helm import render

ROOT = Path(__file__).resolve().parents[2]
URL = "https://keda-operator-metrics-apiserver.keda.svc:443"


def upstream_args(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith("--upstream-")]


def parsed(args: list[str]) -> object:
    """The container's args as `prescaler serve` parses them (file checks aside)."""
    ns = build_parser().parse_args(args)
    assert ns.upstream_external_metrics_url == URL
    return ns


def test_helm_upstream_off_by_default() -> None:
    objects = render()
    container = objects[("Deployment", "prescaler", "prescaler")]["spec"]["template"]["spec"]["containers"][0]
    assert upstream_args(container["args"]) == []
    assert ("ClusterRole", "prescaler-upstream-reader", "") not in objects


def test_helm_upstream_with_token_and_ca() -> None:
    objects = render({"upstream": {"externalMetricsURL": URL, "timeout": 3, "caConfigMap": "keda-ca"}})
    pod = objects[("Deployment", "prescaler", "prescaler")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert upstream_args(container["args"]) == [
        f"--upstream-external-metrics-url={URL}",
        "--upstream-timeout=3",
        "--upstream-ca-file=/upstream/ca/ca.crt",
        "--upstream-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token",
    ]
    ns = parsed(container["args"])
    assert ns.upstream_timeout == 3.0 and ns.upstream_ca_file == "/upstream/ca/ca.crt"  # type: ignore[attr-defined]
    assert {"name": "upstream-ca", "mountPath": "/upstream/ca", "readOnly": True} in container["volumeMounts"]
    assert {"name": "upstream-ca", "configMap": {"name": "keda-ca"}} in pod["volumes"]
    role = objects[("ClusterRole", "prescaler-upstream-reader", "")]
    assert role["rules"] == [{"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list"]}]
    binding = objects[("ClusterRoleBinding", "prescaler-upstream-reader", "")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prescaler", "namespace": "prescaler"}]
    assert k8s_errors(list(objects.values()), "1.30") == []


def test_helm_upstream_with_client_certificate() -> None:
    objects = render(
        {
            "upstream": {
                "externalMetricsURL": URL,
                "clientCertSecret": "prescaler-upstream-client",
                "readerBinding": False,
            }
        }
    )
    pod = objects[("Deployment", "prescaler", "prescaler")]["spec"]["template"]["spec"]
    args = upstream_args(pod["containers"][0]["args"])
    assert "--upstream-client-cert-file=/upstream/client/tls.crt" in args
    assert "--upstream-client-key-file=/upstream/client/tls.key" in args
    assert not any(a.startswith("--upstream-token-file") for a in args)
    assert any(
        v["name"] == "upstream-client" and v["secret"]["secretName"] == "prescaler-upstream-client"
        for v in pod["volumes"]
    )
    assert ("ClusterRole", "prescaler-upstream-reader", "") not in objects


def test_helm_rejects_a_url_with_a_query() -> None:
    with pytest.raises(Exception, match="externalMetricsURL"):
        render({"upstream": {"externalMetricsURL": "https://x/?a=b"}})


def test_kustomize_component(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = Path(os.path.relpath(ROOT, overlay))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(rel / "deploy")],
                "components": [str(rel / "deploy" / "upstream")],
            }
        )
    )
    objects = {key(d): d for d in load_all(kustomize(str(overlay)))}
    pod = objects[("Deployment", "prescaler", NAMESPACE)]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[:4] == [
        "serve",
        "--secure-port=6443",
        "--tls-cert-file=/certs/tls.crt",
        "--tls-private-key-file=/certs/tls.key",
    ]  # the base's args are kept
    parsed(args)
    assert {"name": "upstream-ca", "configMap": {"name": "prescaler-upstream-ca"}} in pod["volumes"]
    assert ("ClusterRoleBinding", "prescaler-upstream-reader", "") in objects
    assert k8s_errors(list(objects.values()), "1.30") == []


def test_cli_flags_reach_the_config(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    ns = build_parser().parse_args(
        [
            "serve",
            "--upstream-external-metrics-url",
            URL,
            "--upstream-token-file",
            str(token),
            "--upstream-timeout",
            "2.5",
            "--upstream-max-connections",
            "7",
        ]
    )
    cfg = config_from_args(ns)
    assert cfg is not None and (cfg.url, cfg.timeout, cfg.max_connections, cfg.token_file) == (URL, 2.5, 7, str(token))
    assert config_from_args(build_parser().parse_args(["serve"])) is None
