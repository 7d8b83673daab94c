"""Sources under hostile input: compression bombs, huge documents, exploding calendars, crashing
expressions, address tricks, and many sources at once. Each case failed (or could not be expressed)
before the fix it guards."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest

import adapter.sources.api as api_module
import adapter.sources.http as http_module
from adapter.errors import SourceError, ValidationError
from adapter.expressions import compile_expression
from adapter.items import Item
from adapter.resources import parse_virtual_metric_event
from adapter.sources.api import MAX_ITEMS, ApiSource, parse_items_document
from adapter.sources.base import CommonSourceSettings, ExpansionBudget, FetchResult, Source, SourceContext
from adapter.sources.http import HttpClient, TlsConfig, check_url, forbidden_reason, shared_pool_count
from adapter.sources.registry import config_parsers
from adapter.sources.runner import SourceRunner, StartSpreader
from adapter.sources.schedule import MAX_ITEMS_PER_CALENDAR, ScheduleSource
from tests.fake_sources import raising
from tests.source_http_fixture import start_server

T0 = 1_700_545_800.0
MIB = 1024 * 1024


@pytest.fixture
def server():
    state, stop = start_server({})
    yield state
    stop()


def encoded(body: bytes, content_encoding: str) -> Callable[[BaseHTTPRequestHandler], None]:
    def handler(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Encoding", content_encoding)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    return handler


def get(url: str, max_bytes: int = MIB) -> bytes:
    async def run() -> bytes:
        client = HttpClient(TlsConfig())
        try:
            return (await client.get(url, timeout=10.0, max_bytes=max_bytes)).body
        finally:
            await client.aclose()

    return asyncio.run(run())


def peak_bytes(action: Callable[[], object]) -> int:
    """Peak Python heap while `action` runs (zlib output buffers are Python bytes, so they count)."""
    tracemalloc.start()
    try:
        try:
            action()
        except SourceError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------- 1: decompression bombs

ZEROS = bytes(64 * MIB)
ONE_LAYER = gzip.compress(ZEROS, compresslevel=9)  # ~64 KB on the wire, 64 MiB inside
TWO_LAYERS = gzip.compress(ONE_LAYER, compresslevel=9)  # a few hundred bytes: "gzip, gzip"


@pytest.mark.parametrize("body,coding", [(TWO_LAYERS, "gzip, gzip"), (ONE_LAYER, "gzip")], ids=["gzip-gzip", "gzip"])
def test_gzip_bomb_stops_at_the_limit_while_inflating(server, body, coding):
    server.routes["/bomb"] = encoded(body, coding)
    with pytest.raises(SourceError, match=r"larger than 1048576 bytes after decompression"):
        get(server.base_url + "/bomb")
    # Inflated in bounded pieces: the peak stays near the limit, not near the 64 MiB inside.
    assert peak_bytes(lambda: get(server.base_url + "/bomb")) < 8 * MIB


def test_compressed_responses_within_the_limit_are_decoded(server):
    document = json.dumps({"items": [{"start": T0, "end": T0 + 60, "values": {"n": 1}}] * 1000}).encode()
    server.routes["/gz"] = encoded(gzip.compress(document), "gzip")
    server.routes["/gzgz"] = encoded(gzip.compress(gzip.compress(document)), "gzip, gzip")
    server.routes["/zlib"] = encoded(zlib.compress(document), "deflate")
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    server.routes["/raw"] = encoded(raw.compress(document) + raw.flush(), "deflate")
    for path in ("/gz", "/gzgz", "/zlib", "/raw"):
        assert get(server.base_url + path) == document, path
    assert "gzip" in server.requests[-1]["headers"]["Accept-Encoding"]


@pytest.mark.parametrize(
    "coding,message",
    [
        ("br", r"unsupported Content-Encoding 'br'"),
        ("gzip, gzip, gzip", r"3 stacked content codings"),
    ],
)
def test_codings_we_do_not_need_are_refused(server, coding, message):
    server.routes["/x"] = encoded(gzip.compress(b"{}"), coding)
    with pytest.raises(SourceError, match=message):
        get(server.base_url + "/x")


def test_truncated_and_corrupt_gzip_are_source_errors(server):
    server.routes["/cut"] = encoded(gzip.compress(b'{"items": []}' * 100)[:20], "gzip")
    server.routes["/junk"] = encoded(b"definitely not gzip", "gzip")
    with pytest.raises(SourceError, match=r"truncated"):
        get(server.base_url + "/cut")
    with pytest.raises(SourceError, match=r"cannot decode the compressed response"):
        get(server.base_url + "/junk")


# ---------------------------------------------------------------- 6: huge documents, off the loop


def test_item_limit_applies_while_reading():
    # MAX_ITEMS + 1 items, then bytes that are not JSON at all: a reader that decodes the whole
    # document first reports the garbage; one that counts while reading stops before it.
    body = b'{"items": [' + b"{}," * (MAX_ITEMS + 1) + b"\x00 garbage that is not JSON"
    with pytest.raises(SourceError, match=rf"more than the limit of {MAX_ITEMS} items \(stopped reading"):
        parse_items_document(body, "u")


def test_item_documents_are_parsed_in_a_worker_thread_unless_tiny(server, monkeypatch):
    from adapter.sources.http import SMALL_BODY_BYTES

    threads: list[threading.Thread] = []
    real = api_module.parse_items_document

    def spy(body: bytes, where: str) -> FetchResult:
        threads.append(threading.current_thread())
        return real(body, where)

    monkeypatch.setattr(api_module, "parse_items_document", spy)
    item = {"start": T0, "end": T0 + 60, "values": {"n": 1}}
    large = json.dumps({"items": [item] * 200}).encode()
    assert len(large) > SMALL_BODY_BYTES
    server.routes["/large"] = (200, "application/json", large)
    server.routes["/tiny"] = (200, "application/json", json.dumps({"items": [item]}).encode())

    async def run(path: str) -> threading.Thread:
        source = ApiSource(
            ApiSource.parse_config({"url": server.base_url + path}, "spec.source.api"),
            CommonSourceSettings(),
            SourceContext(),
        )
        try:
            await source.fetch(T0)
        finally:
            await source.close()
        return threading.current_thread()

    loop_thread = asyncio.run(run("/large"))
    assert len(threads) == 1 and threads[0] is not loop_thread
    # A body of a few items parses faster than the hand-off to the worker takes: on the loop.
    loop_thread = asyncio.run(run("/tiny"))
    assert len(threads) == 2 and threads[1] is loop_thread


def schedule(block: dict, context: SourceContext) -> ScheduleSource:
    return ScheduleSource(
        ScheduleSource.parse_config(block, "spec.source.schedule"), CommonSourceSettings(interval=60), context
    )


EVERY_MINUTE = {"windows": [{"cron": "* * * * *", "duration": "1m", "values": {"n": 1}}]}


def test_one_calendar_is_capped_with_a_clear_message():
    source = schedule({**EVERY_MINUTE, "lookahead": "744h"}, SourceContext())  # 31 days of minutes
    with pytest.raises(SourceError, match=rf"more than {MAX_ITEMS_PER_CALENDAR} items within its lookahead"):
        asyncio.run(source.fetch(T0))


def test_all_calendars_share_one_expansion_budget():
    context = SourceContext(expansion_budget=ExpansionBudget(total=12_000))
    sources = [schedule(EVERY_MINUTE, context) for _ in range(3)]  # ~4 300 items each

    async def run() -> list[FetchResult | BaseException]:
        return [await _try(source.fetch(T0)) for source in sources]

    first, second, third = asyncio.run(run())
    assert isinstance(first, FetchResult) and isinstance(second, FetchResult)
    assert len(first.items) + len(second.items) <= 12_000
    assert isinstance(third, SourceError) and "12000 items in total" in str(third)
    # A calendar that fits keeps fitting: its next expansion reuses its own share, even while the
    # third one keeps asking.
    assert isinstance(asyncio.run(_try(sources[2].fetch(T0))), SourceError)
    assert isinstance(asyncio.run(_try(sources[0].fetch(T0 + 60))), FetchResult)
    assert len(first.items) + len(second.items) <= context.expansion_budget.used <= 12_000
    # Deleting a calendar gives its share back.
    asyncio.run(sources[0].close())
    assert isinstance(asyncio.run(_try(sources[2].fetch(T0))), FetchResult)


def test_a_calendar_that_cannot_fit_is_not_expanded_again_and_again(monkeypatch):
    """Expanding is the expensive part (croniter, in the one source worker thread): a calendar whose
    count says it cannot fit its limit or the budget's room fails at once, without expanding."""
    from adapter.sources import schedule as schedule_module

    calls = []
    real_expand = schedule_module.expand

    def counting_expand(*args, **kwargs):
        calls.append(1)
        return real_expand(*args, **kwargs)

    monkeypatch.setattr(schedule_module, "expand", counting_expand)
    too_big = schedule({**EVERY_MINUTE, "lookahead": "744h"}, SourceContext())
    for now in (T0, T0 + 60, T0 + 120, T0 + schedule_module.OVER_LIMIT_RECHECK_SECONDS):
        refused = asyncio.run(_try(too_big.fetch(now)))
        assert isinstance(refused, SourceError) and "more than 20000 items" in str(refused)
    assert calls == []  # counted from the cron's fields: the same answer, never the work

    context = SourceContext(expansion_budget=ExpansionBudget(total=6_000))
    first, second = schedule(EVERY_MINUTE, context), schedule(EVERY_MINUTE, context)  # ~4 300 items each
    assert isinstance(asyncio.run(_try(first.fetch(T0))), FetchResult)
    assert len(calls) == 1
    for now in (T0, T0 + 60):
        refused = asyncio.run(_try(second.fetch(now)))
        assert isinstance(refused, SourceError) and "6000 items in total" in str(refused)
    assert len(calls) == 1  # the second one never expanded: its count did not fit the room left
    asyncio.run(first.close())  # room again: it expands and fits
    assert isinstance(asyncio.run(_try(second.fetch(T0 + 120))), FetchResult)
    assert len(calls) == 2


async def _try(awaitable: object) -> FetchResult | BaseException:
    try:
        return await awaitable  # type: ignore[misc]
    except SourceError as exc:
        return exc


# ---------------------------------------------------------------- 4: nothing stops a source's loop


class Flaky(Source[None]):
    """Fails in a different way on each of its first fetches, then succeeds."""

    kind = "flaky"

    def __init__(self, failures: list[BaseException]):
        super().__init__(None, CommonSourceSettings(interval=0.01, timeout=1.0), SourceContext())
        self.failures = list(failures)
        self.calls = 0

    @classmethod
    def parse_config(cls, spec: object, path: str) -> None:
        return None

    async def fetch(self, now: float) -> FetchResult:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return FetchResult(items=[Item(start=now, end=now + 60, values={"x": 2.0})])


def run_until(runner: SourceRunner, done: Callable[[], bool], deadline: float = 10.0) -> None:
    async def go() -> None:
        runner.start()
        limit = time.monotonic() + deadline
        try:
            while not done() and time.monotonic() < limit:
                await asyncio.sleep(0.01)
            assert runner._task is not None and not runner._task.done(), "the source loop ended"
        finally:
            await runner.stop()

    asyncio.run(go())


def test_no_exception_ends_the_source_loop(monkeypatch):
    monkeypatch.setattr("adapter.sources.runner.MAX_BACKOFF_EXPONENT", -10)  # retry at once in the test
    source = Flaky([OverflowError("int too large"), ZeroDivisionError("division by zero"), KeyError("x")])
    runner = SourceRunner("vme", source, lambda _name, _items: None, spreader=StartSpreader(rate=1e9))
    run_until(runner, lambda: runner.health.last_success is not None)
    assert source.calls == 4 and runner.health.last_success is not None


@pytest.mark.parametrize(
    "expression", ["round(x, 10000000000)", "round(x, 1/0)", " * ".join(["1000000000000000000"] * 18) + " * x"]
)
def test_an_expression_that_blows_up_does_not_end_the_loop(monkeypatch, expression):
    """The engine evaluates expressions when it takes a snapshot; whatever escapes from there is
    caught by the runner, reported, and the next fetch runs."""
    monkeypatch.setattr("adapter.sources.runner.MAX_BACKOFF_EXPONENT", -10)
    compiled = compile_expression(expression, "spec.metrics[0].value.expression")
    taken: list[int] = []

    def on_snapshot(_name: str, items: list[Item]) -> None:
        taken.append(len(items))
        compiled.evaluate_many({"x": np.array([i.values["x"] for i in items])}, len(items))

    source = Flaky([])
    runner = SourceRunner("vme", source, on_snapshot, spreader=StartSpreader(rate=1e9))
    run_until(runner, lambda: len(taken) >= 3)
    assert len(taken) >= 3


def test_a_failure_only_a_change_can_fix_waits_for_the_interval_instead_of_backing_off():
    """A calendar beyond its limit fails the same way on every retry: retrying every few seconds (as
    for a flaky endpoint) would only burn the CPU the server answers with."""

    async def delays_after(failure: BaseException) -> list[float]:
        source = Flaky([failure, failure])
        source.common = CommonSourceSettings(interval=60.0, timeout=1.0)
        runner = SourceRunner("vme", source, lambda _n, _i: None, spreader=StartSpreader(rate=1e9))
        out = []
        for _ in range(2):
            await runner.fetch_once()
            out.append(runner.next_delay())
        await runner.fetch_once()  # succeeds: back to the interval either way
        out.append(runner.next_delay())
        return out

    transient = asyncio.run(delays_after(SourceError("connection refused")))
    permanent = asyncio.run(delays_after(SourceError("more than 20000 items", retry_soon=False)))
    assert transient[0] < 3 and transient[1] < 5  # backoff from 2 s
    assert all(54 <= d <= 66 for d in permanent)  # the interval, with its jitter
    assert 54 <= transient[2] <= 66


def test_calendar_failures_say_retrying_soon_cannot_help():
    too_big = schedule({**EVERY_MINUTE, "lookahead": "744h"}, SourceContext())
    with pytest.raises(SourceError) as limit:
        asyncio.run(too_big.fetch(T0))
    context = SourceContext(expansion_budget=ExpansionBudget(total=10))
    with pytest.raises(SourceError) as budget:
        asyncio.run(schedule(EVERY_MINUTE, context).fetch(T0))
    assert limit.value.retry_soon is False and budget.value.retry_soon is False


# ---------------------------------------------------------------- many sources at once


def test_first_fetches_are_spread_over_the_interval():
    clock = [0.0]
    spreader = StartSpreader(rate=50.0, clock=lambda: clock[0])
    delays = [spreader.delay(30.0) for _ in range(2000)]
    assert max(delays) <= 30.0 and min(delays) >= 0.0
    # No burst: at most about `rate` first fetches in any second of the interval...
    counts = np.bincount(np.floor(delays).astype(int), minlength=30)
    assert counts.max() <= 2 * 50 + 20
    # ...and every second of the interval gets some.
    assert (counts > 0).all()
    # A single source (or the first few) still starts at once.
    assert StartSpreader(clock=lambda: 0.0).delay(30.0) < 0.1


def test_runners_started_together_use_the_shared_spreader(monkeypatch):
    monkeypatch.setattr("adapter.sources.runner.START_RATE_PER_SECOND", 10.0)

    async def go() -> list[float]:
        runners = [SourceRunner(f"vme{i}", Flaky([]), lambda _n, _i: None) for i in range(50)]
        for runner in runners:
            runner.source.common = CommonSourceSettings(interval=3.0, timeout=1.0)
            runner.start()
        limit = time.monotonic() + 5
        while any(r.first_delay is None for r in runners) and time.monotonic() < limit:
            await asyncio.sleep(0.01)
        delays = [r.first_delay for r in runners]
        for runner in runners:
            await runner.stop()
        return [d for d in delays if d is not None]

    delays = asyncio.run(go())
    assert len(delays) == 50 and max(delays) <= 3.0
    assert np.bincount(np.floor(delays).astype(int)).max() <= 25  # not all at time 0


def test_sources_share_one_pool_with_bounded_concurrency(server, monkeypatch):
    monkeypatch.setattr(http_module, "MAX_CONCURRENT_REQUESTS", 3)
    lock = threading.Lock()
    in_flight = [0, 0]  # now, peak

    def handler(req: BaseHTTPRequestHandler) -> None:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        threading.Event().wait(0.1)  # a slow endpoint
        with lock:
            in_flight[0] -= 1
        req._send(200, "application/json", b'{"items": []}')  # type: ignore[attr-defined]

    server.routes["/m"] = handler
    config = ApiSource.parse_config({"url": server.base_url + "/m"}, "spec.source.api")

    async def go() -> int:
        sources = [ApiSource(config, CommonSourceSettings(timeout=10.0), SourceContext()) for _ in range(12)]
        try:
            await asyncio.gather(*(source.fetch(T0) for source in sources))
            return shared_pool_count()
        finally:
            for source in sources:
                await source.close()

    assert asyncio.run(go()) == 1
    assert len(server.requests) == 12 and in_flight[1] <= 3


# ---------------------------------------------------------------- address forms


@pytest.mark.parametrize(
    "address,reason",
    [
        ("::169.254.169.254", "metadata"),  # IPv4-compatible
        ("::a9fe:a9fe", "metadata"),  # the same, written in hex
        ("64:ff9b::169.254.169.254", "metadata"),  # NAT64 well-known prefix
        ("64:ff9b::a9fe:1", "link-local"),
        ("64:ff9b:1::a9fe:a9fe", "metadata"),  # NAT64 local-use prefix
        ("2002:a9fe:a9fe::1", "metadata"),  # 6to4
        ("::ffff:169.254.1.1", "link-local"),
        ("64:ff9b::10.0.0.1", None),
        ("::1", None),
        ("::", None),
    ],
)
def test_embedded_ipv4_forms_are_checked(address, reason):
    result = forbidden_reason(address)
    if reason is None:
        assert result is None
    else:
        assert result is not None and reason in result


@pytest.mark.parametrize(
    "url",
    [
        "http://0251.0376.0251.0376/",
        "http://0xa9fea9fe/",
        "http://2852039166/",
        "http://169.254.43518/",
        "http://0x7f.1/",
    ],
)
def test_numeric_ipv4_forms_are_refused_at_load(url):
    with pytest.raises(ValidationError, match=r"numeric IPv4 form other than dotted decimal"):
        check_url(url, "spec.source.api.url")


def test_octal_metadata_url_is_a_load_error_naming_the_field():
    doc = {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "e"},
        "spec": {
            "source": {"api": {"url": "http://0251.0376.0251.0376/latest/meta-data/"}},
            "metrics": [{"name": "m", "resource": {"name": "a", "namespace": "ns"}, "value": {"expression": "n"}}],
        },
    }
    with pytest.raises(ValidationError) as caught:
        parse_virtual_metric_event(doc, config_parsers())
    assert "spec.source.api.url" in str(caught.value) and "dotted decimal" in str(caught.value)


def test_a_failure_that_repeats_logs_its_traceback_once(monkeypatch, caplog):
    monkeypatch.setattr("adapter.sources.runner.MAX_BACKOFF_EXPONENT", -10)
    source = Flaky([OverflowError("again")] * 5)
    runner = SourceRunner("vme", source, lambda _name, _items: None, spreader=StartSpreader(rate=1e9))
    with caplog.at_level("WARNING", logger="prescaler.sources"):
        run_until(runner, lambda: runner.health.last_success is not None)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert source.calls == 6 and len(tracebacks) == 1


def test_local_sources_start_at_once_remote_ones_are_spread():
    async def go() -> tuple[float | None, list[float | None]]:
        spreader = StartSpreader(rate=1.0)  # one remote start per second at most
        local = SourceRunner("cal", schedule(EVERY_MINUTE, SourceContext()), lambda _n, _i: None, spreader=spreader)
        remote = [SourceRunner(f"r{i}", Flaky([]), lambda _n, _i: None, spreader=spreader) for i in range(3)]
        for runner in [local, *remote]:
            runner.source.common = CommonSourceSettings(interval=60.0, timeout=1.0)
            runner.start()
        limit = time.monotonic() + 5
        while any(r.first_delay is None for r in [local, *remote]) and time.monotonic() < limit:
            await asyncio.sleep(0.01)
        for runner in [local, *remote]:
            await runner.stop()
        return local.first_delay, [r.first_delay for r in remote]

    local_delay, remote_delays = asyncio.run(go())
    assert local_delay == 0.0
    assert sorted(d for d in remote_delays if d is not None)[-1] >= 1.0  # the third waits its turn


def test_small_calendars_fill_the_budget_to_the_last_item():
    """A calendar holds exactly its items, so small calendars are never refused for what they do not
    use (with a share per calendar of a whole expansion step, 40 of these would need 40 960)."""
    hourly = {"windows": [{"cron": "0 * * * *", "duration": "1m", "values": {"n": 1}}], "lookahead": "1h"}
    size = len(asyncio.run(schedule(hourly, SourceContext()).fetch(T0)).items)  # a day back, an hour ahead
    assert 20 < size < 30
    context = SourceContext(expansion_budget=ExpansionBudget(total=40 * size + size - 1))
    sources = [schedule(hourly, context) for _ in range(41)]

    async def run() -> list[FetchResult | BaseException]:
        return [await _try(source.fetch(T0)) for source in sources]

    *fitting, last = asyncio.run(run())
    assert all(isinstance(r, FetchResult) and len(r.items) == size for r in fitting)
    assert context.expansion_budget.used == 40 * size
    assert isinstance(last, SourceError) and f"{41 * size - 1} items in total" in str(last)
    # Each one's next expansion still fits in its own share.
    assert isinstance(asyncio.run(_try(sources[0].fetch(T0 + 3600))), FetchResult)


def test_failed_fetches_leave_no_cyclic_garbage_holding_their_items() -> None:
    """A failure raised through asyncio.wait_for sits in a reference cycle with its frames; the
    server freezes its heap after publishing, so such garbage (here each refused calendar's partial
    expansion) stayed for up to 15 minutes: 10 000 refused calendars grew RSS by 200 MB."""
    import gc

    block = {"windows": [{"cron": "* * * * *", "duration": "1m", "values": {"n": 1}}]}
    context = SourceContext()
    context.expansion_budget = ExpansionBudget(5_000)  # one calendar fits; the next ones are refused
    config = ScheduleSource.parse_config(block, "spec.source.schedule")

    def broken(now: float) -> FetchResult:
        payload = [Item(start=now, end=now + 1, values={"n": 1.0}) for _ in range(100)]
        raise RuntimeError(f"a bug, with {len(payload)} items in its frame")

    async def scenario() -> tuple[int, list[str | None]]:
        runners = [
            SourceRunner(
                f"cal-{i}", ScheduleSource(config, CommonSourceSettings(interval=60), context), lambda *_: None
            )
            for i in range(6)
        ]
        runners.append(SourceRunner("broken", raising(broken), lambda *_: None))
        gc.collect()
        gc.disable()
        try:
            for _ in range(2):
                await asyncio.gather(*(runner.fetch_once() for runner in runners))
            return gc.collect(), [runner.health.last_error for runner in runners]
        finally:
            gc.enable()

    garbage, errors = asyncio.run(scenario())
    assert errors[0] is None and all("may expand to 5000 items" in (e or "") for e in errors[1:6])
    assert "RuntimeError" in (errors[6] or "")
    assert garbage == 0
