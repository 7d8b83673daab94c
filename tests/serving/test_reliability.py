"""Fast reliability cases: bounded selectors and response cache, hostile expressions in a running
engine. The long attacks (idle/slow connections, 100 000 fuzzed requests, churn) are in
bench/reliability.py; the connection limits are tested on real sockets in test_serving_guard.py."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from adapter.api import app as api_app
from adapter.api.app import PrescalerApp
from adapter.labels import MAX_REQUIREMENTS, MAX_SELECTOR_LENGTH, MAX_VALUES, SelectorError, parse_selector
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event

V1 = "/apis/external.metrics.k8s.io/v1beta1"
ITEM = {"start": NOW - 10, "end": NOW + 60, "values": {"x": 3}}


# ---------------------------------------------------------------- selector size


def test_selector_within_the_bounds_parses() -> None:
    values = ",".join(f"svc-{i}" for i in range(MAX_VALUES))
    selector = parse_selector(f"resource in ({values})")
    assert len(selector.requirements[0].values) == MAX_VALUES


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("resource in (" + ",".join(f"s{i}" for i in range(MAX_VALUES + 1)) + ")", "values"),
        (",".join(f"k{i}=v" for i in range(MAX_REQUIREMENTS + 1)), "requirements"),
        (
            "a in ("
            + ",".join(f"v{i}" for i in range(MAX_VALUES // 2))
            + "),b in ("
            + ",".join(f"v{i}" for i in range(MAX_VALUES // 2 + 1))
            + ")",
            "values in all",
        ),
        ("k=" + "v" * MAX_SELECTOR_LENGTH, "longer than"),
    ],
)
def test_oversized_selectors_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError, match=fragment):
        parse_selector(text)


def _targets(count: int) -> list[dict]:
    entries = [entry("ns", f"svc-{i}", "x * 2") for i in range(count)]
    return [metric("rps"), schedule_event("many", [ITEM], entries)]


async def _requests(docs: list[dict], paths: list[str]) -> tuple[PrescalerApp, list]:
    import httpx

    engine = await loaded_engine(docs)
    app = PrescalerApp(engine)
    responses = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://p.test") as client:
        for path in paths:
            responses.append(await client.get(path))
    await engine.stop()
    return app, responses


def test_a_selector_with_thousands_of_values_is_a_400_status() -> None:
    values = ",".join(f"s{i}" for i in range(3000))  # ~20 KB: far beyond the bounds, within httpx's URL limit
    path = f"{V1}/namespaces/ns/rps?labelSelector=" + quote(f"resource in ({values})")
    _, [response] = run(_requests(_targets(3), [path]))
    assert response.status_code == 400
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "BadRequest"
    assert "longer than" in body["message"] or "values" in body["message"]


# ---------------------------------------------------------------- response cache in bytes


def test_large_answers_are_not_cached_and_the_cache_is_bounded_in_bytes() -> None:
    small = f"{V1}/namespaces/ns/rps?labelSelector=resource%3Dsvc-1"
    large = [f"{V1}/namespaces/ns/rps?labelSelector=" + quote(f"resource notin (svc-{i})") for i in range(3)]
    app, responses = run(_requests(_targets(1000), [small, *large]))
    assert all(r.status_code == 200 for r in responses)
    assert len(responses[1].content) > api_app.MAX_CACHED_BODY_BYTES  # ~1000 items
    assert len(responses[1].json()["items"]) == 999
    cached_queries = {key[2] for key in app._responses}
    assert cached_queries == {b"labelSelector=resource%3Dsvc-1"}
    assert 0 < app._cached_bytes <= api_app.MAX_CACHED_BODY_BYTES


def test_cache_total_is_kept_under_its_byte_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_app, "MAX_CACHED_TOTAL_BYTES", 2000)
    paths = [f"{V1}/namespaces/ns/rps?labelSelector=resource%3Dsvc-{i}" for i in range(40)]
    app, responses = run(_requests(_targets(40), paths))
    assert all(r.status_code == 200 for r in responses)
    assert app._cached_bytes <= 2000
    assert app._cached_bytes == sum(len(v[3]) + len(k[2]) for k, v in app._responses.items())


# ---------------------------------------------------------------- hostile expressions in the engine


@pytest.mark.parametrize(
    "hostile",
    [
        "round(x, 1/0)",
        "round(x, 10000000000)",
        "round(x, x * 1e18)",
        " * ".join(["1000000000000000000"] * 18),
        "x ** 64 ** 64",
    ],
)
def test_hostile_expression_drops_only_its_own_contribution(hostile: str) -> None:
    docs = [
        metric("rps", defaultValue=1),
        schedule_event("ev", [ITEM], [entry("ns", "bad", hostile), entry("ns", "good", "x * 2")]),
    ]

    async def go() -> tuple[list[str], list[str]]:
        engine = await loaded_engine(docs)  # fetches once: used to raise out of the fetch
        app = PrescalerApp(engine)
        import httpx

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://p.test") as c:
            good = (await c.get(f"{V1}/namespaces/ns/rps?labelSelector=resource%3Dgood")).json()
            bad = (await c.get(f"{V1}/namespaces/ns/rps?labelSelector=resource%3Dbad")).json()
        await engine.stop()
        return [i["value"] for i in good["items"]], [i["value"] for i in bad["items"]]

    good, bad = run(go())
    assert good == ["6"]
    # round(x, 10000000000) is a valid rounding (3); the others fail and fall back to the default.
    assert bad in (["1"], ["3"])
