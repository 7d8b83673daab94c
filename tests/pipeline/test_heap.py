"""adapter.heap: loaded objects go to the permanent generation; snapshots still get freed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from adapter import heap
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event, settle


@pytest.fixture()
def enabled() -> Iterator[None]:
    heap.enable()
    try:
        yield
    finally:
        heap.enable(False)  # thaws: the rest of the test session collects as usual


def test_disabled_by_default_and_enabled_it_freezes_what_is_alive(enabled: None) -> None:
    heap.enable(False)
    assert not heap.after_publish() and gc.get_freeze_count() == 0
    heap.enable()
    kept = [[i] for i in range(1000)]
    heap.after_publish()
    assert gc.get_freeze_count() >= len(kept)
    gc.collect()  # a full collection no longer walks the frozen objects
    assert gc.get_freeze_count() >= len(kept)


def test_a_full_collection_runs_at_most_once_per_interval(enabled: None) -> None:
    start = 1e9
    heap._last_full = start
    assert not heap.after_publish(clock=start + heap.FULL_COLLECT_SECONDS - 1)
    assert heap.after_publish(clock=start + heap.FULL_COLLECT_SECONDS)
    assert not heap.after_publish(clock=start + heap.FULL_COLLECT_SECONDS + 1)


def test_replaced_snapshots_are_freed_although_frozen(enabled: None) -> None:
    """Snapshots hold no reference cycles, so freezing after each publish does not keep old ones."""
    docs = [
        metric("rps"),
        schedule_event(
            "a",
            [{"start": NOW, "end": NOW + 600, "values": {"n": 1}}],
            [entry("ns", f"svc-{i}", "n") for i in range(300)],
        ),
    ]

    async def go() -> list[int]:
        engine = await loaded_engine(docs)
        counts = []
        for n in range(12):
            engine.apply(
                schedule_event(
                    "a",
                    [{"start": NOW, "end": NOW + 600, "values": {"n": n + 2}}],
                    [entry("ns", f"svc-{i}", "n") for i in range(300)],
                )
            )
            await settle(engine)
            counts.append(gc.get_freeze_count())
        await engine.stop()
        return counts

    counts = run(go())
    # Each publish replaces 300 targets (and their labels, timelines, plans): were the old ones kept,
    # the frozen count would grow by thousands per round.
    assert counts[-1] - counts[3] < 2000, counts


def test_no_collection_pauses_the_collector_and_nests(enabled: None) -> None:
    assert gc.isenabled()
    with heap.no_collection():
        assert not gc.isenabled()
        with heap.no_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    heap.enable(False)
    with heap.no_collection():  # disabled policy: the collector is left alone
        assert gc.isenabled()


def test_quiet_imports_pauses_collection_and_restores_it() -> None:
    assert gc.isenabled()
    with heap.quiet_imports():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        with heap.quiet_imports():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_quiet_imports_with_freeze_moves_what_is_alive_to_the_permanent_generation() -> None:
    try:
        with heap.quiet_imports(freeze=True):
            kept = [object() for _ in range(10)]  # noqa: F841 - alive at the freeze
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_overlapping_pauses_resume_collection_only_when_the_last_ends(enabled: None) -> None:
    # The server's start: the first list is parsed on a watch thread (no_collection) while the main
    # thread still imports (quiet_imports); neither may switch collection back on under the other.
    quiet = heap.quiet_imports(freeze=True)
    quiet.__enter__()
    with heap.no_collection():
        pass
    assert not gc.isenabled()  # the imports are still going on
    listing = heap.no_collection()
    listing.__enter__()
    quiet.__exit__(None, None, None)
    assert not gc.isenabled()  # the list is still being parsed
    listing.__exit__(None, None, None)
    assert gc.isenabled()
