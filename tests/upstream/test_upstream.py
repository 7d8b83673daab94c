"""Upstream passthrough (adapter/upstream) against a second external-metrics server over real TLS with
token auth that misbehaves on purpose (tests/upstream_server.py). prescaler runs in-process here; the
full `prescaler serve` over HTTPS is in test_upstream_e2e.py."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from adapter.api.app import PrescalerApp
from adapter.observability import REGISTRY
from adapter.upstream import Passthrough, UpstreamConfig, UpstreamConfigError
from adapter.upstream.passthrough import parse_resource_list
from tests.helpers import NOW, entry, free_port, loaded_engine, metric, run, schedule_event
from tests.pki import TestPKI
from tests.upstream_server import TOKEN, UpstreamServer

V1 = "/apis/external.metrics.k8s.io/v1beta1"
OWN = [
    metric("rps"),
    schedule_event(
        "stage", [{"start": NOW, "end": NOW + 60, "values": {"m": 5}}], [entry("service-a", "service-a", "m * 2")]
    ),
]
KEDA_PATH = f"{V1}/namespaces/service-a/keda-metric?labelSelector=scaledobject.keda.sh%2Fname%3Dworker"


@pytest.fixture()
def pki(tmp_path: Path) -> TestPKI:
    return TestPKI(tmp_path / "pki")


@pytest.fixture()
def upstream(pki: TestPKI) -> Iterator[UpstreamServer]:
    server = UpstreamServer(pki, names=["keda-metric", "rps"]).start()
    yield server
    server.stop()


def token_file(tmp_path: Path, token: str = TOKEN) -> Path:
    path = tmp_path / "upstream-token"
    path.write_text(token + "\n")
    return path


def config(pki: TestPKI, url: str, tmp_path: Path, **kw: Any) -> UpstreamConfig:
    kw.setdefault("token_file", str(token_file(tmp_path)))
    kw.setdefault("timeout", 2.0)
    return UpstreamConfig(url=url, ca_file=str(pki.serving_ca_file), **kw)


async def scenario(passthrough: Passthrough, body: Any) -> Any:
    engine = await loaded_engine(OWN)
    app = PrescalerApp(engine, upstream=passthrough)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://p.test") as c:
            return await body(c, passthrough)
    finally:
        await passthrough.stop()
        await engine.stop()


def test_forwards_other_metrics_with_own_identity_same_path_and_query(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        r = await c.get(
            KEDA_PATH,
            headers={
                "Authorization": "Bearer caller-secret",
                "X-Remote-User": "admin",
                "X-Remote-Group": "system:masters",
                "Cookie": "s=1",
                "Impersonate-User": "root",
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["items"][0]["metricLabels"] == {"selector": "scaledobject.keda.sh/name=worker"}
        own = await c.get(f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a")
        assert own.status_code == 200 and own.json()["items"][0]["value"] == "10"

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path)), body))
    [seen] = upstream.seen
    assert seen.path == KEDA_PATH  # raw path and query, unchanged
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"  # prescaler's identity, not the caller's
    assert not {"x-remote-user", "x-remote-group", "cookie", "impersonate-user"} & set(seen.headers)
    assert "caller-secret" not in json.dumps(seen.headers)


def test_upstream_answers_pass_through_unchanged(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        direct_ctx = pki.ssl_context(client=None)
        async with httpx.AsyncClient(verify=direct_ctx) as direct:
            for mode, path in (
                ("ok", f"{V1}/namespaces/x/unknown-to-both"),
                ("error500", KEDA_PATH),
                ("garbage", KEDA_PATH),
                ("ok", KEDA_PATH),
            ):
                upstream.mode = mode
                via = await c.get(path)
                straight = await direct.get(upstream.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
                assert (via.status_code, via.content, via.headers["content-type"]) == (
                    straight.status_code,
                    straight.content,
                    straight.headers["content-type"],
                ), mode
        assert upstream.mode == "ok"

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path)), body))


def test_no_retries(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        upstream.mode = "error500"
        assert (await c.get(KEDA_PATH)).status_code == 500
        upstream.mode = "reset"
        r = await c.get(KEDA_PATH)
        assert r.status_code == 503 and r.json()["reason"] == "ServiceUnavailable"

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path)), body))
    assert len(upstream.requests_for("keda-metric")) == 2  # one request each, never repeated


def test_huge_answer_is_refused(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        for mode in ("huge", "huge_chunked"):
            upstream.mode = mode
            r = await c.get(KEDA_PATH)
            assert r.status_code == 503, mode
            assert r.json()["kind"] == "Status" and "exceeds 65536 bytes" in r.json()["message"]

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path, max_response_bytes=65536)), body))


def test_hanging_upstream_gets_504_while_own_metrics_answer(pki, upstream, tmp_path) -> None:
    upstream.mode = "hang"

    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        forwarded = [asyncio.create_task(c.get(KEDA_PATH)) for _ in range(4)]
        await _wait_until(lambda: upstream.in_flight >= 2)
        for _ in range(20):
            own = await c.get(f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a")
            assert own.status_code == 200
            disc = await c.get(V1)
            assert disc.status_code == 200
        ready = await c.get("/readyz")
        assert ready.status_code == 200
        # The pool limit holds: 4 forwarded requests, but only 2 connections to the upstream.
        assert (upstream.connections, upstream.in_flight) == (2, 2)
        assert not any(t.done() for t in forwarded)  # own answers did not wait for the upstream
        answers = await asyncio.gather(*forwarded)
        assert [a.status_code for a in answers] == [504] * 4
        assert all(a.json()["reason"] == "Timeout" and "within 10s" in a.json()["message"] for a in answers)

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path, timeout=10.0, max_connections=2)), body))
    upstream.release.set()


def test_down_upstream_gets_503_and_discovery_keeps_cached_names(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        assert await p.refresh_discovery()
        names = [r["name"] for r in (await c.get(V1)).json()["resources"]]
        assert names == ["keda-metric", "rps"]
        upstream.stop()
        assert not await p.refresh_discovery()
        assert [r["name"] for r in (await c.get(V1)).json()["resources"]] == names
        r = await c.get(KEDA_PATH)
        assert r.status_code == 503 and r.json()["reason"] == "ServiceUnavailable"
        assert (await c.get("/readyz")).status_code == 200
        own = await c.get(f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a")
        assert own.status_code == 200

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path)), body))


def test_never_started_upstream_is_503(pki, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        assert not await p.refresh_discovery()
        assert [r["name"] for r in (await c.get(V1)).json()["resources"]] == ["rps"]
        assert (await c.get(KEDA_PATH)).status_code == 503

    run(scenario(Passthrough(config(pki, f"https://127.0.0.1:{free_port()}", tmp_path)), body))


def test_metric_defined_by_both_prescaler_wins_logged_once(pki, upstream, tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="prescaler.upstream")

    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        await p.refresh_discovery()
        for _ in range(3):
            await c.get(V1)
            await p.refresh_discovery()
        r = await c.get(f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a")
        assert r.json()["items"][0]["value"] == "10"  # prescaler's, not the upstream's 42
        assert p.shadowed == frozenset({"rps"})

    engine_names = lambda: ["rps"]  # noqa: E731 - what the server passes: the engine's metric_names
    run(scenario(Passthrough(config(pki, upstream.url, tmp_path), own_names=engine_names), body))
    assert upstream.requests_for("/rps") == []
    warnings = [r for r in caplog.records if "'rps' is defined by prescaler and by the upstream" in r.getMessage()]
    assert len(warnings) == 1


def test_token_file_rotation_is_picked_up(pki, tmp_path) -> None:
    up = UpstreamServer(pki, names=["keda-metric"], tokens={"new-token"}).start()
    try:
        cfg = config(pki, up.url, tmp_path)

        async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
            assert (await c.get(KEDA_PATH)).status_code == 401  # the upstream's own 401, passed through
            token_file(tmp_path, "new-token-but-longer")
            up.tokens.add("new-token-but-longer")
            assert (await c.get(KEDA_PATH)).status_code == 200

        run(scenario(Passthrough(cfg), body))
    finally:
        up.stop()


def test_client_certificate_identity(pki, tmp_path) -> None:
    up = UpstreamServer(pki, names=["keda-metric"], client_ca_file=str(pki.client_ca_file)).start()
    try:
        cert, key = pki.client("system:serviceaccount:prescaler:prescaler")

        async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
            assert (await c.get(KEDA_PATH)).status_code == 200

        run(
            scenario(
                Passthrough(
                    config(pki, up.url, tmp_path, token_file=None, client_cert_file=str(cert), client_key_file=str(key))
                ),
                body,
            )
        )

        async def rejected(c: httpx.AsyncClient, p: Passthrough) -> None:
            assert (await c.get(KEDA_PATH)).status_code == 503  # TLS handshake refused: no usable answer

        run(scenario(Passthrough(config(pki, up.url, tmp_path, token_file=None)), rejected))
    finally:
        up.stop()


def test_untrusted_upstream_certificate_is_refused(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        assert (await c.get(KEDA_PATH)).status_code == 503

    cfg = UpstreamConfig(url=upstream.url, ca_file=str(pki.evil_ca_file), token_file=str(token_file(tmp_path)))
    run(scenario(Passthrough(cfg), body))
    assert upstream.seen == []


def test_metrics_exposition(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        await c.get(KEDA_PATH)
        upstream.mode = "reset"
        await c.get(KEDA_PATH)
        text = (await c.get("/metrics")).text
        assert 'prescaler_upstream_requests_total{code="200",kind="value"}' in text
        assert 'prescaler_upstream_errors_total{kind="value",reason="unavailable"}' in text
        assert 'prescaler_upstream_request_duration_seconds_count{kind="value"}' in text
        assert 'prescaler_request_duration_seconds_count{code="200",route="upstream"}' in text

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path)), body))
    assert b"prescaler_upstream_shadowed_metrics" in generate_latest(REGISTRY)


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"url": "ftp://x"}, "--upstream-external-metrics-url"),
        ({"url": "https://x?a=b"}, "--upstream-external-metrics-url"),
        ({"url": "https://x", "timeout": 0}, "--upstream-timeout"),
        ({"url": "https://x", "client_cert_file": "/etc/hostname"}, "--upstream-client-key-file"),
        ({"url": "https://x", "ca_file": "/nonexistent/ca.crt"}, "--upstream-ca-file"),
        ({"url": "https://x", "max_connections": 0}, "--upstream-max-connections"),
    ],
)
def test_bad_configuration_names_the_flag(kwargs, flag) -> None:
    with pytest.raises(UpstreamConfigError, match=flag):
        UpstreamConfig(**kwargs)


@pytest.mark.parametrize("body", [b"nope", b'{"kind":"Status"}', b'{"kind":"APIResourceList","resources":3}'])
def test_unusable_discovery_answers_are_rejected(body) -> None:
    with pytest.raises(ValueError):
        parse_resource_list(body)


async def _wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def test_shadowing_virtual_metric_gets_a_status_condition(pki, upstream, tmp_path) -> None:
    from adapter.upstream.status import CONDITION, with_shadow_conditions

    notified: list[bool] = []

    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        p.on_shadowed_change = lambda: notified.append(True)
        desired = {
            ("VirtualMetric", "requests"): (2, {"conditions": [{"type": "Ready", "status": "True"}]}),
            ("VirtualMetric", "other"): (1, {"conditions": []}),
            ("VirtualMetricEvent", "rps"): (1, {"conditions": []}),
        }
        combined = with_shadow_conditions(lambda: desired, p, lambda: {"requests": "rps", "other": "other"})
        assert combined() == desired  # nothing known about the upstream yet
        await p.refresh_discovery()
        status = combined()
        conditions = status[("VirtualMetric", "requests")][1]["conditions"]
        assert [c["type"] for c in conditions] == ["Ready", CONDITION]
        assert conditions[1]["status"] == "True" and "rps" in conditions[1]["message"]
        assert status[("VirtualMetric", "other")] == desired[("VirtualMetric", "other")]
        assert status[("VirtualMetricEvent", "rps")] == desired[("VirtualMetricEvent", "rps")]
        assert notified == [True]
        upstream.names = ["keda-metric"]  # the upstream drops rps: the condition goes away
        await p.refresh_discovery()
        assert combined() == desired and notified == [True, True]

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path), own_names=lambda: ["rps", "other"]), body))


def test_unprintable_content_type_is_not_copied(pki, upstream, tmp_path) -> None:
    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        upstream.mode = "garbage"
        upstream.garbage_content_type = "text/plain; x=\xe9\x7f"
        r = await c.get(KEDA_PATH)
        assert r.status_code == 200 and r.content == b"\x00not json {{{"
        assert r.headers["content-type"] == "application/json"

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path)), body))


def test_dripping_upstream_is_cut_at_the_deadline(pki, upstream, tmp_path) -> None:
    """Every read returns within httpx's per-read timeout; only a deadline on the whole exchange ends it."""
    upstream.mode = "drip"

    async def body(c: httpx.AsyncClient, p: Passthrough) -> None:
        r = await c.get(KEDA_PATH)
        assert r.status_code == 504 and r.json()["reason"] == "Timeout"

    run(scenario(Passthrough(config(pki, upstream.url, tmp_path, timeout=1.0)), body))
    upstream.release.set()
