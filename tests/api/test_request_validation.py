"""What the API refuses before any lookup, and how (docs/api.md §1.1, §1.3, §3): the namespace and
metric path segments, the ListOptions query, methods on the non-/apis routes, and the default item
of a selector that pins a resource."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from prometheus_client import generate_latest

from adapter.api import app as app_module
from adapter.api.app import PrescalerApp
from adapter.observability import REGISTRY
from adapter.upstream import Passthrough, UpstreamConfig
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event
from tests.pki import TestPKI
from tests.upstream_server import TOKEN, UpstreamServer

V1 = "/apis/external.metrics.k8s.io/v1beta1"
ITEM = {"start": NOW, "end": NOW + 60, "values": {"m": 5}}


def docs() -> list[dict[str, Any]]:
    return [
        metric("rps", defaultValue=7),
        schedule_event(
            "gold-vme",
            [ITEM],
            [entry("shop", "service-a", "m * 2"), entry("shop", "service-b", "m")],
            labels={"tier": "gold"},
        ),
    ]


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


async def asgi(app: Any, method: str, path: str, query: bytes = b"") -> Answer:
    """One request straight into the ASGI app, path as given (an HTTP client would normalise `..`)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": unquote(path),
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"prescaler.test")],
        "client": ("127.0.0.1", 1),
        "server": ("prescaler.test", 443),
    }
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        messages.append(dict(message))

    await app(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return Answer(start["status"], headers, body)


def requests(calls: list[tuple[str, str, bytes]], wrap: Any = None) -> list[Answer]:
    async def body() -> list[Answer]:
        engine = await loaded_engine(docs())
        engine.test_clock["now"] = NOW + 10
        if wrap is not None:
            wrap(engine)
        app = PrescalerApp(engine)
        try:
            return [await asgi(app, method, path, query) for method, path, query in calls]
        finally:
            await engine.stop()

    return run(body())


def one(path: str, query: bytes = b"", method: str = "GET") -> Answer:
    return requests([(method, path, query)])[0]


def status_of(answer: Answer) -> tuple[int, str, str]:
    assert answer.headers["content-type"] == "application/json"
    doc = answer.json()
    assert doc["kind"] == "Status" and doc["code"] == answer.status
    return answer.status, doc["reason"], doc["message"]


# ---------------------------------------------------------------- default item (pipeline/query.py)


def test_pinned_resource_excluded_by_other_terms_gets_no_phantom_item() -> None:
    excluded, matched, unfed = requests(
        [
            ("GET", f"{V1}/namespaces/shop/rps", b"labelSelector=resource%3Dservice-a%2Ctier%21%3Dgold"),
            ("GET", f"{V1}/namespaces/shop/rps", b"labelSelector=resource%3Dservice-a%2Ctier%3Dgold"),
            ("GET", f"{V1}/namespaces/shop/rps", b"labelSelector=resource%3Dnobody%2Ctier%21%3Dgold"),
        ]
    )
    # service-a exists, labelled tier=gold: the selector excludes it, and no {resource: service-a}
    # item with the default value stands in for it.
    assert excluded.status == 200 and excluded.json()["items"] == []
    (item,) = matched.json()["items"]
    assert item["metricLabels"] == {"resource": "service-a", "tier": "gold"} and item["value"] == "10"
    # A resource nothing feeds still gets the default item.
    (item,) = unfed.json()["items"]
    assert item["metricLabels"] == {"resource": "nobody"} and item["value"] == "7"


def test_pinned_resources_mixed_fed_excluded_and_unfed() -> None:
    r = one(f"{V1}/namespaces/shop/rps", b"labelSelector=resource+in+%28nobody%2Cservice-a%29%2Ctier%21%3Dgold")
    assert [i["metricLabels"] for i in r.json()["items"]] == [{"resource": "nobody"}]


# ---------------------------------------------------------------- methods on the non-/apis routes

FIXED_ROUTES = [
    "/healthz",
    "/livez",
    "/readyz",
    "/version",
    "/metrics",
    "/openapi/v2",
    "/openapi/v3",
    "/openapi/v3/apis/external.metrics.k8s.io/v1beta1",
    "/prescaler/v1/preview",
]


@pytest.mark.parametrize("path", FIXED_ROUTES)
def test_head_mirrors_get_without_a_body(path: str) -> None:
    get, head = requests([("GET", path, b""), ("HEAD", path, b"")])
    assert head.status == get.status
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.body == b""
    if path != "/metrics":  # the exposition itself changes between the two requests
        assert head.headers["content-length"] == str(len(get.body))


@pytest.mark.parametrize("path", FIXED_ROUTES)
def test_other_methods_on_a_fixed_route_are_405_status(path: str) -> None:
    answers = requests([(m, path, b"") for m in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "BREW")])
    for method, answer in zip(("POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "BREW"), answers):
        code, reason, message = status_of(answer)
        assert (code, reason) == (405, "MethodNotAllowed")
        assert message == f"the server does not allow this method on the requested resource ({method})"
        assert answer.json()["details"] == {}


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "TRACE", "CONNECT", "BREW"])
def test_unknown_paths_stay_plain_text_404(method: str) -> None:
    for path in ("/nope", "/healthz/", "/healthz/x", "/openapi/v3/apis"):
        r = one(path, method=method)
        assert r.status == 404 and r.headers["content-type"].startswith("text/plain")
        assert r.body == (b"" if method == "HEAD" else b"404 page not found\n")
        assert r.headers["content-length"] == str(len(b"404 page not found\n"))


def test_fastapi_errors_are_never_its_detail_json() -> None:
    """Whatever reaches the FastAPI app itself answers a Status (or the text/plain 404)."""

    async def body() -> list[Answer]:
        engine = await loaded_engine(docs())
        app = PrescalerApp(engine)
        try:
            return [
                await asgi(app.fastapi, "TRACE", "/healthz"),
                await asgi(app.fastapi, "POST", "/metrics"),
                await asgi(app.fastapi, "TRACE", "/nope"),
            ]
        finally:
            await engine.stop()

    trace, post, unknown = run(body())
    for answer in (trace, post):
        assert "detail" not in answer.json()
        assert status_of(answer)[:2] == (405, "MethodNotAllowed")
    assert unknown.status == 404 and unknown.body == b"404 page not found\n"


def test_apis_methods_unchanged() -> None:
    head, post = requests([("HEAD", "/apis", b""), ("POST", f"{V1}/namespaces/shop/rps", b"")])
    assert head.status == 200
    assert status_of(post)[:2] == (405, "MethodNotAllowed")


# ---------------------------------------------------------------- namespace segment

BAD_NAMESPACES = [
    "Shop",
    "a_b",
    "-a",
    "a-",
    "a.b",
    ".",
    "..",
    'x"y',
    "a%0Ab",
    "a%20b",
    "%E2%98%83",
    "a" * 64,
    "n" + "x" * 60000,
]


def test_invalid_namespaces_are_400_before_any_query_or_metric() -> None:
    queried: list[str] = []

    def wrap(engine: Any) -> None:
        real = engine.query

        def query(metric: str, namespace: str, *args: Any, **kw: Any) -> Any:
            queried.append(namespace)
            return real(metric, namespace, *args, **kw)

        engine.query = query

    calls = [("GET", f"{V1}/namespaces/{ns}/rps", b"labelSelector=resource%3Dservice-a") for ns in BAD_NAMESPACES]
    answers = requests(calls, wrap=wrap)
    for ns, answer in zip(BAD_NAMESPACES, answers):
        code, reason, message = status_of(answer)
        assert (code, reason) == (400, "BadRequest"), ns
        assert message.startswith('invalid namespace "') and "RFC 1123 label" in message
        assert "[a-z0-9]([-a-z0-9]*[a-z0-9])?" in message and "63 characters" in message
        assert len(message) < 400  # the 60 KB namespace is not echoed
        assert json.dumps(unquote(ns)[:20], ensure_ascii=False)[1:-1] in message
    assert queried == []
    exposition = generate_latest(REGISTRY).decode()
    assert "x" * 100 not in exposition and "a_b" not in exposition


def test_valid_and_wildcard_namespaces_still_answer() -> None:
    ok, longest, wildcard = requests(
        [
            ("GET", f"{V1}/namespaces/shop/rps", b"labelSelector=resource%3Dservice-a"),
            ("GET", f"{V1}/namespaces/{'a' * 63}/rps", b"labelSelector=resource%3Dservice-a"),
            ("GET", f"{V1}/namespaces/*/rps", b""),
        ]
    )
    assert ok.status == 200 and ok.json()["items"][0]["value"] == "10"
    assert longest.status == 200 and longest.json()["items"][0]["value"] == "7"
    assert [i["metricLabels"]["resource"] for i in wildcard.json()["items"]] == ["service-a", "service-b"]


# ---------------------------------------------------------------- ListOptions

PATH = f"{V1}/namespaces/shop/rps"


@pytest.mark.parametrize(
    "query",
    [
        b"limit=500",
        b"limit=-1&timeoutSeconds=%2B30",
        b"timeoutSeconds=9223372036854775807",
        b"fieldSelector=",
        b"fieldSelector=metadata.name%3Dx",
        b"fieldSelector=metadata.name%3D%3Dx%2Cmetadata.namespace%21%3Dy",
        b"fieldSelector=metadata.name%3Da%5C%2Cb",
        b"watch=false",
        b"watch=0",
        b"watch=FaLsE",
        b"allowWatchBookmarks=banana",
        b"resourceVersion=12345",
        b"resourceVersion=0&resourceVersionMatch=NotOlderThan",
        b"resourceVersion=7&resourceVersionMatch=Exact",
        b"continue=abc",
    ],
)
def test_list_options_kube_accepts(query: bytes) -> None:
    r = one(PATH, b"labelSelector=resource%3Dservice-a&" + query)
    assert r.status == 200, r.body
    assert r.json()["items"][0]["value"] == "10"


@pytest.mark.parametrize(
    "query, message",
    [
        (b"limit=abc", 'strconv.ParseInt: parsing "abc": invalid syntax'),
        (b"limit=", 'strconv.ParseInt: parsing "": invalid syntax'),
        (b"limit=1.5", 'strconv.ParseInt: parsing "1.5": invalid syntax'),
        (b"limit=%D9%A3", 'strconv.ParseInt: parsing "\u0663": invalid syntax'),  # a non-ASCII digit
        (b"limit=9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
        (b"timeoutSeconds=10s", 'strconv.ParseInt: parsing "10s": invalid syntax'),
        (b"fieldSelector=foo", "invalid selector: 'foo'; can't understand 'foo'"),
        (b"fieldSelector=metadata.name%3Dx%2Cbar", "invalid selector: 'metadata.name=x,bar'; can't understand 'bar'"),
        (b"fieldSelector=metadata.name%3Da%5Cb", "invalid field selector: invalid escape sequence: \\b"),
        (b"fieldSelector=metadata.name%3Da%5C", "invalid field selector: invalid escape sequence: \\"),
        (b"fieldSelector=metadata.name%3Da%3Db", "invalid field selector: unescaped character in value: 61"),
        (
            b"fieldSelector=spec.replicas%3D1",
            '"spec.replicas" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
    ],
)
def test_list_options_decode_errors_are_400(query: bytes, message: str) -> None:
    assert status_of(one(PATH, query)) == (400, "BadRequest", message)


@pytest.mark.parametrize(
    "query, messages",
    [
        (b"resourceVersionMatch=Exact", ["resourceVersionMatch is forbidden unless resourceVersion is provided"]),
        (b"resourceVersion=1&resourceVersionMatch=Newest", ['Unsupported value: "Newest"']),
        (b"resourceVersion=0&resourceVersionMatch=Exact", ['resourceVersionMatch "exact" is forbidden']),
        (b"sendInitialEvents=true", ["sendInitialEvents is forbidden for list"]),
        (
            b"resourceVersionMatch=NotOlderThan&continue=x",
            ["forbidden unless resourceVersion", "forbidden when continue is provided"],
        ),
    ],
)
def test_list_options_validation_is_422_invalid(query: bytes, messages: list[str]) -> None:
    answer = one(PATH, query)
    code, reason, message = status_of(answer)
    assert (code, reason) == (422, "Invalid")
    assert message.startswith('ListOptions.meta.k8s.io "" is invalid: ')
    assert all(m in message for m in messages)
    details = answer.json()["details"]
    assert details["group"] == "meta.k8s.io" and details["kind"] == "ListOptions"
    assert len(details["causes"]) == len(messages)


@pytest.mark.parametrize("value", [b"true", b"1", b"TRUE", b"t", b"yes", b""])
def test_watch_is_405(value: bytes) -> None:
    code, reason, message = status_of(one(PATH, b"labelSelector=resource%3Dservice-a&watch=" + value))
    assert (code, reason) == (405, "MethodNotAllowed")
    assert message == 'watch is not supported on resources of kind "rps.external.metrics.k8s.io"'


def test_bad_selector_wins_over_watch_as_in_kube() -> None:
    # kube decodes every field (selectors included) before it looks at watch.
    assert status_of(one(PATH, b"labelSelector=a%3D%3D%3D&watch=true"))[:2] == (400, "BadRequest")
    assert status_of(one(PATH, b"limit=x&watch=true"))[:2] == (400, "BadRequest")


def test_steady_state_query_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    query = b"labelSelector=resource%3Dservice-a&limit=5&fieldSelector=metadata.name%3Dx"
    app_module._list_options_cached.cache_clear()
    selector, watch = app_module._list_options(query)
    assert not watch and selector.matches({"resource": "service-a"})

    def fail(_: bytes) -> Any:
        raise AssertionError("decoded again")

    monkeypatch.setattr(app_module, "_parse_list_options", fail)
    assert app_module._list_options(query) == (selector, False)


# ---------------------------------------------------------------- metric segment, with an upstream


@pytest.fixture()
def upstream(tmp_path: Path) -> Iterator[tuple[UpstreamServer, UpstreamConfig]]:
    pki = TestPKI(tmp_path / "pki")
    server = UpstreamServer(pki, names=["keda-metric"]).start()
    token = tmp_path / "token"
    token.write_text(TOKEN)
    config = UpstreamConfig(url=server.url, ca_file=str(pki.serving_ca_file), token_file=str(token), timeout=2.0)
    yield server, config
    server.stop()


BAD_METRICS = [".", "..", "%2E%2E", "%2e", "a%25b", "%25"]


def test_dot_and_percent_metric_segments_are_404_and_never_forwarded(upstream: Any) -> None:
    server, config = upstream

    async def body() -> list[Answer]:
        engine = await loaded_engine(docs())
        passthrough = Passthrough(config)
        app = PrescalerApp(engine, upstream=passthrough)
        try:
            answers = [await asgi(app, "GET", f"{V1}/namespaces/shop/{m}") for m in BAD_METRICS]
            answers.append(await asgi(app, "GET", f"{V1}/namespaces/shop/a%2Fb"))
            answers.append(await asgi(app, "GET", f"{V1}/namespaces/shop/keda-metric"))  # still forwarded
            return answers
        finally:
            await passthrough.stop()
            await engine.stop()

    *refused, split, forwarded = run(body())
    for m, answer in zip(BAD_METRICS, refused):
        assert status_of(answer) == (
            404,
            "NotFound",
            f"the server could not find the metric {unquote(m)} for namespaces",
        )
    assert status_of(split)[:2] == (404, "NotFound")
    assert forwarded.status == 200
    assert [s.path for s in server.seen] == [f"{V1}/namespaces/shop/keda-metric"]


def test_passthrough_never_forwards_dot_segments(upstream: Any) -> None:
    server, config = upstream

    async def body() -> list[Any]:
        passthrough = Passthrough(config)
        try:
            return [
                await passthrough.forward("GET", f"{V1}/namespaces/shop/.."),
                await passthrough.forward("GET", f"{V1}/namespaces/%2e/x".encode()),
            ]
        finally:
            await passthrough.stop()

    for answer in run(body()):
        assert answer.code == 404 and json.loads(answer.body)["reason"] == "NotFound"
    assert server.seen == []


def test_dot_metric_without_upstream_is_the_same_404() -> None:
    assert status_of(one(f"{V1}/namespaces/shop/..")) == (
        404,
        "NotFound",
        "the server could not find the metric .. for namespaces",
    )
