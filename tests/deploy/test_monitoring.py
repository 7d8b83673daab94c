"""deploy/monitoring: the alert rules pass the real promtool (syntax and unit tests), the dashboard's
PromQL parses, and every prescaler_* name they use is exported by a real running prescaler.
Also: /metrics is authorized the Kubernetes way, the served-value series are bounded, and the Helm
chart's scraper ClusterRole and optional ServiceMonitor."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from adapter import observability as obs
from adapter.api.app import PrescalerApp
from adapter.auth.factory import build_auth
from adapter.auth.middleware import AuthMiddleware
from tests.helpers import loaded_engine, metric
from tests.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make tools)")
NAME = re.compile(r"\bprescaler_[a-z0-9_]+")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "unknown": ("",),
}


def rule_groups() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    return doc["spec"]["groups"]


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def as_promql(expr: str) -> str:
    """Grafana's variables replaced by what they expand to, so promtool can parse the query."""
    return (
        expr.replace("$__rate_interval", "5m")
        .replace("$namespace", ".*")
        .replace("$metric", ".*")
        .replace("$event", ".*")
    )


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


# ------------------------------------------------------------------ rules and dashboard with promtool


@needs_promtool
def test_promtool_check_rules_passes(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    result = promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"]}
    assert {
        "PrescalerSourceStale",
        "PrescalerSourceFetchErrors",
        "PrescalerExpressionErrors",
        "PrescalerAPIServiceErrors",
        "PrescalerNoSuccessfulFetchSinceStart",
        "PrescalerPublishFailing",
    } <= alerts


@needs_promtool
def test_dashboard_queries_parse(tmp_path: Path) -> None:
    exprs = [e for e in dashboard_exprs() if not e.startswith("label_values")]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:query_{i}", "expr": as_promql(e)} for i, e in enumerate(exprs)],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert any("kube_horizontalpodautoscaler_status_current_replicas" in e for e in exprs)
    assert any("prescaler_served_value" in e for e in exprs)


@needs_promtool
def test_alerts_fire_when_they_should(tmp_path: Path) -> None:
    """promtool's rule unit tests: stale, failing and never-successful sources; quiet when healthy."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'prescaler_source_stale{event="broken", instance="a"}', "values": "0 0 1x20"},
                    {"series": 'prescaler_source_stale{event="fine", instance="a"}', "values": "0x22"},
                    {
                        "series": 'prescaler_event_fetches_total{event="broken", result="error", instance="a"}',
                        "values": "0+6x22",
                    },
                    {
                        "series": 'prescaler_event_fetches_total{event="broken", result="success", instance="a"}',
                        "values": "0x22",
                    },
                    {
                        "series": 'prescaler_event_fetches_total{event="fine", result="success", instance="a"}',
                        "values": "1+6x22",
                    },
                    {"series": 'prescaler_expression_failures_total{event="fine", instance="a"}', "values": "0+1x22"},
                    # Replica a fails to publish from minute 3 on (retried every minute at most); b never.
                    {"series": 'prescaler_timeline_recompute_failures_total{instance="a"}', "values": "0 0 0 1+1x19"},
                    {"series": 'prescaler_timeline_recompute_failures_total{instance="b"}', "values": "0x22"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "PrescalerSourceStale",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "event": "broken"},
                                "exp_annotations": _annotations("PrescalerSourceStale", {"event": "broken"}),
                            }
                        ],
                    },
                    {
                        "eval_time": "21m",
                        "alertname": "PrescalerNoSuccessfulFetchSinceStart",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "event": "broken", "instance": "a"},
                                "exp_annotations": _annotations(
                                    "PrescalerNoSuccessfulFetchSinceStart", {"event": "broken", "instance": "a"}
                                ),
                            }
                        ],
                    },
                    {"eval_time": "2m", "alertname": "PrescalerSourceStale", "exp_alerts": []},
                    {
                        "eval_time": "12m",
                        "alertname": "PrescalerPublishFailing",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical", "instance": "a"},
                                "exp_annotations": _annotations("PrescalerPublishFailing", {"instance": "a"}),
                            }
                        ],
                    },
                    {"eval_time": "2m", "alertname": "PrescalerPublishFailing", "exp_alerts": []},
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _annotations(alert: str, labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations with {{ $labels.x }} filled in (what promtool compares)."""
    rule = next(r for g in rule_groups() for r in g["rules"] if r.get("alert") == alert)
    out = {}
    for key, text in rule["annotations"].items():
        for name, value in labels.items():
            text = text.replace("{{ $labels." + name + " }}", value)
        out[key] = text
    return out


# ------------------------------------------------------------------ names against a real /metrics


def exported_names(exposition: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(exposition):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def test_every_name_in_dashboard_and_rules_is_exported_by_a_running_prescaler(tmp_path: Path) -> None:
    with ServeProcess([ROOT / "examples" / "local"], tmp_path) as server:
        # Produce the per-target series: an HPA-like query for a target the examples name.
        deadline = time.monotonic() + 60
        scraped = ""
        while time.monotonic() < deadline:
            server.get(
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/service-b/rps",
                params={"labelSelector": "resource=service-b"},
            )
            scraped = server.get("/metrics").text
            if (
                'prescaler_event_fetches_total{event="campaign-schedule",result="success"}' in scraped
                and "prescaler_served_value{" in scraped
            ):
                break
            time.sleep(0.5)
    exported = exported_names(scraped)
    used = {name for text in [RULES.read_text(), *dashboard_exprs()] for name in NAME.findall(text)}
    assert used, "no prescaler_* names found"
    missing = sorted(used - exported)
    assert not missing, f"used but not exported by /metrics: {missing}"
    assert re.search(r'prescaler_build_info\{commit="[^"]+",version="[^"]+"\} 1\.0', scraped), scraped[:2000]
    assert (
        'prescaler_queries_total{code="200",metric="rps"}' in scraped
        or 'prescaler_queries_total{code="503",metric="rps"}' in scraped
    )


# ------------------------------------------------------------------ /metrics authorization


class FakeAuthz:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.sars: list[dict[str, Any]] = []

    def create_subject_access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sars.append(body)
        return {"status": {"allowed": self.allow, "reason": "test"}}


@pytest.mark.parametrize("allow,code", [(True, 200), (False, 403)])
def test_metrics_is_authorized_with_a_non_resource_subject_access_review(
    tmp_path: Path, allow: bool, code: int
) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('scraper-token,system:serviceaccount:monitoring:prometheus,uid-1,"system:authenticated"\n')
    options = argparse.Namespace(token_auth_file=str(tokens), authentication_skip_lookup=True)
    authz = FakeAuthz(allow)

    async def scrape() -> httpx.Response:
        engine = await loaded_engine([metric("rps")])
        try:
            authn, authorizer, _ = build_auth(options, authz_api=authz, start_watchers=False)  # type: ignore[arg-type]
            app = AuthMiddleware(PrescalerApp(engine), authn, authorizer)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://p.test") as c:
                return await c.get("/metrics", headers={"Authorization": "Bearer scraper-token"})
        finally:
            await engine.stop()

    response = asyncio.run(scrape())
    assert response.status_code == code
    [sar] = authz.sars
    assert sar["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert sar["spec"]["user"] == "system:serviceaccount:monitoring:prometheus"
    if allow:
        assert "prescaler_request_duration_seconds" in response.text


def test_kustomize_base_has_the_scraper_cluster_role() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "prescaler-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_helm_chart_scraper_role_and_optional_service_monitor() -> None:
    from tests.deploy.test_manifests_helm import render

    default = render()
    assert ("ClusterRole", "prescaler-metrics-reader", "") in default
    assert not any(kind == "ServiceMonitor" for kind, _, _ in default)
    subject = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    objects = render(
        {"metrics": {"readerSubjects": [subject], "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}}
    )
    binding = objects[("ClusterRoleBinding", "prescaler-metrics-reader", "")]
    assert binding["subjects"] == [subject] and binding["roleRef"]["name"] == "prescaler-metrics-reader"
    monitor = objects[("ServiceMonitor", "prescaler", "prescaler")]
    assert monitor["metadata"]["labels"]["release"] == "kps"
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == ("https", "https", "/metrics")
    assert endpoint["tlsConfig"]["serverName"] == "prescaler.prescaler.svc"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "prescaler-tls", "key": "ca.crt"}
    service = objects[("Service", "prescaler", "prescaler")]
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert any(p["name"] == "https" for p in service["spec"]["ports"])


# ------------------------------------------------------------------ bounded served-value series


def test_served_values_keep_only_the_most_recently_queried_targets() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("t_served_value", "x", ["metric", "namespace", "resource"], registry=registry)
    served = obs.ServedValues(gauge, max_targets=3)
    evicted_before = obs.SERVED_EVICTED._value.get()
    for i in range(4):
        served.record("rps", "ns", f"t{i}", float(i))
    served.record("rps", "ns", "t1", 10.0)  # queried again: most recent now
    served.record("rps", "ns", "t4", 4.0)
    text = generate_latest(registry).decode()
    shown = set(re.findall(r'resource="(t\d)"', text))
    assert shown == {"t1", "t3", "t4"}
    assert 't_served_value{metric="rps",namespace="ns",resource="t1"} 10.0' in text
    assert obs.SERVED_EVICTED._value.get() - evicted_before == 2
