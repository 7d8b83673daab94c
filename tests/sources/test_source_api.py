"""`api` source: the seed format over HTTP, ids, and junk documents."""

from __future__ import annotations

import asyncio
import json

import pytest

from adapter.errors import SourceError, ValidationError
from adapter.sources.api import MAX_ITEMS, ApiSource, parse_items_document
from adapter.sources.base import CommonSourceSettings, FetchResult, SourceContext
from adapter.sources.runner import SourceRunner
from tests.source_http_fixture import start_server, stream_bytes

T0 = 1_700_545_800


@pytest.fixture
def server():
    state, stop = start_server({})
    yield state
    stop()


def make_source(block: dict, context: SourceContext | None = None, timeout: float = 5.0) -> ApiSource:
    config = ApiSource.parse_config(block, "spec.source.api")
    return ApiSource(config, CommonSourceSettings(interval=30, timeout=timeout), context or SourceContext())


def fetch_result(source: ApiSource) -> FetchResult:
    async def run():
        try:
            return await source.fetch(T0)
        finally:
            await source.close()

    return asyncio.run(run())


def fetch(source: ApiSource) -> list:
    return list(fetch_result(source).items)


def serve_json(server, path: str, document) -> str:
    server.routes[path] = (200, "application/json", json.dumps(document).encode())
    return server.base_url + path


def test_seed_document_round_trip(server):
    url = serve_json(
        server,
        "/metrics",
        {
            "items": [
                {"start": T0, "end": T0 + 60, "values": {"scheduledMessage": 50}},
                {"start": T0 + 60, "end": T0 + 120, "values": {"scheduledMessage": 7.5}, "id": "b2"},
            ]
        },
    )
    items = fetch(make_source({"url": url}))
    assert [(i.start, i.end, dict(i.values), i.id) for i in items] == [
        (T0, T0 + 60, {"scheduledMessage": 50.0}, None),
        (T0 + 60, T0 + 120, {"scheduledMessage": 7.5}, "b2"),
    ]


def test_duplicate_ids_count_once_last_wins(server):
    url = serve_json(
        server,
        "/m",
        {
            "items": [
                {"start": T0, "end": T0 + 60, "values": {"n": 1}, "id": "batch-1"},
                {"start": T0, "end": T0 + 60, "values": {"n": 2}, "id": "batch-1"},
                {"start": T0, "end": T0 + 60, "values": {"n": 3}, "id": 7},
            ]
        },
    )
    # The runner dedupes every snapshot once, whatever the kind.
    snapshots: list = []

    async def run():
        runner = SourceRunner("vme", make_source({"url": url}), lambda _name, items: snapshots.append(items))
        try:
            assert await runner.fetch_once()
        finally:
            await runner.stop()

    asyncio.run(run())
    assert [(i.id, i.values["n"]) for i in snapshots[0]] == [("batch-1", 2.0), ("7", 3.0)]


def test_secret_header_is_sent(server):
    url = serve_json(server, "/auth", {"items": []})
    context = SourceContext(secrets=lambda ns, name, key: {"api/token/value": "abc123"}[f"{ns}/{name}/{key}"])
    source = make_source(
        {
            "url": url,
            "headers": [
                {
                    "name": "Authorization",
                    "valueFrom": {"secretKeyRef": {"namespace": "api", "name": "token", "key": "value"}},
                },
            ],
        },
        context,
    )
    assert fetch(source) == []
    assert server.requests[-1]["headers"]["Authorization"] == "abc123"


def test_invalid_items_are_skipped_and_reported(server):
    url = serve_json(
        server,
        "/mixed",
        {
            "items": [
                {"start": T0, "end": T0 + 60, "values": {"n": 1}},
                {"start": T0 + 60, "end": T0, "values": {"n": 1}},  # start >= end
                {"start": "soon", "end": T0 + 60, "values": {"n": 1}},  # wrong type
                {"start": T0, "end": T0 + 60, "values": {"n": 1e300}},  # huge
                "not an object",
            ]
        },
    )
    source = make_source({"url": url})
    result = fetch_result(source)
    items = result.items
    assert len(items) == 1 and items[0].values == {"n": 1.0}
    assert len(result.warnings) == 4
    joined = "\n".join(result.warnings)
    assert "items[1]: start" in joined and "items[2].start" in joined
    assert "items[3].values.n" in joined and "items[4]: expected an object" in joined


def test_nan_literal_in_values_is_rejected_per_item():
    window = f'"start": {T0}, "end": {T0 + 1}'
    body = (
        f'{{"items": [{{{window}, "values": {{"n": NaN}}}}, {{{window}, "values": {{"n": Infinity}}}},'
        f' {{{window}, "values": {{"n": 2}}}}]}}'
    ).encode()
    result = parse_items_document(body, "u")
    assert [i.values["n"] for i in result.items] == [2.0]
    assert len(result.warnings) == 2 and all("not a finite number" in w for w in result.warnings)


def test_huge_integer_literal_is_an_item_error_not_a_crash():
    window = f'"start": {T0}, "end": {T0 + 1}'
    body = f'{{"items": [{{{window}, "values": {{"n": {"9" * 5000}}}}}, {{{window}}}]}}'.encode()
    result = parse_items_document(body, "u")
    # 5000 digits overflow a float: not finite, reported for that one value.
    assert len(result.items) == 1 and list(result.warnings) == ["items[0].values.n: not a finite number"]
    forty_digits = body.replace(b"9" * 5000, b"9" * 40)
    assert "outside" in parse_items_document(forty_digits, "u").warnings[0]


@pytest.mark.parametrize(
    "body,message",
    [
        (b"<html>oops</html>", r"not JSON .*starts with '<html>oops</html>'"),
        (b"[1, 2]", r"expected a JSON object with an \"items\" list, got array"),
        (b'{"data": []}', r"no \"items\" key"),
        (b'{"items": {"a": 1}}', r"\"items\" must be a list, got object"),
        (b"\xff\xfe\x00", r"not UTF-8"),
        (b"[" * 100000 + b"]" * 100000, r"nested too deeply|not JSON"),
    ],
)
def test_documents_that_are_not_the_format_fail_the_fetch(body, message):
    with pytest.raises(SourceError, match=message):
        parse_items_document(body, "http://x/m")


def test_all_items_invalid_fails_the_fetch():
    # Milliseconds instead of seconds: every item is wrong, so the document's format is wrong.
    ms = T0 * 1000
    body = json.dumps({"items": [{"start": ms, "end": ms + 60000, "values": {"n": 1}}] * 3}).encode()
    with pytest.raises(SourceError, match=r"all 3 items are invalid; first: items\[0\].start: .* plausible"):
        parse_items_document(body, "u")


def test_empty_items_is_a_valid_empty_snapshot():
    assert parse_items_document(b'{"items": []}', "u") == FetchResult(items=[])
    assert parse_items_document(b'{"items": null}', "u") == FetchResult(items=[])


def test_too_many_items_fails():
    body = json.dumps({"items": [{}] * (MAX_ITEMS + 1)}).encode()
    with pytest.raises(SourceError, match=rf"more than the limit of {MAX_ITEMS}"):
        parse_items_document(body, "u")


def test_huge_body_fails_with_size_message(server):
    server.routes["/huge"] = stream_bytes(100 * 1024 * 1024)
    with pytest.raises(SourceError, match=r"response larger than 4194304 bytes"):
        fetch(make_source({"url": server.base_url + "/huge"}))


def test_http_error_fails(server):
    server.routes["/err"] = (500, "text/plain", b"boom")
    with pytest.raises(SourceError, match=r"HTTP 500 from http://127.0.0.1:\d+/err: boom"):
        fetch(make_source({"url": server.base_url + "/err"}))


def test_parse_config_rejects_unknown_fields_with_path():
    with pytest.raises(ValidationError, match=r"spec.source.api.urll: unknown field"):
        ApiSource.parse_config({"url": "http://x/", "urll": 1}, "spec.source.api")
    with pytest.raises(ValidationError, match=r"spec.source.api.url: required"):
        ApiSource.parse_config({}, "spec.source.api")


def test_registry_builds_api_source():
    from adapter.sources.registry import config_parsers, create_source, default_interval

    config = config_parsers()["api"]("api", {"url": "http://svc.ns:8080/items"}, "spec.source.api")
    source = create_source("api", config, CommonSourceSettings(), SourceContext())
    assert isinstance(source, ApiSource) and default_interval("api") == 30.0
    assert source.describe() == "api http://svc.ns:8080/items"
