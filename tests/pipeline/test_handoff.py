"""Long jobs on the event loop run in pieces, in order, without one bad step ending them."""

from __future__ import annotations

import asyncio
import logging

import pytest

from adapter.engine import Engine
from adapter.handoff import LoopHandOff
from adapter.labels import parse_selector
from adapter.pipeline.query import Values
from tests.helpers import entry, metric, run, schedule_event, settle

NOW = 1_900_000_000.0


def burn(seconds: float) -> None:
    """A step of CPU work that holds the loop for `seconds`."""
    busy_until = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < busy_until:
        pass


class LoopTurns:
    """Counts the turns of the loop a coroutine that only yields gets (what a request needs)."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls) -> LoopTurns:
        turns = cls()
        turns._task = asyncio.create_task(turns._run())
        await asyncio.sleep(0)
        return turns

    async def _run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()


def calendar(index: int) -> dict:
    items = [{"start": NOW - 60, "end": NOW + 3600, "values": {"n": index}}]
    return schedule_event(f"cal-{index}", items, [entry("ns", f"target-{index}", "n")])


def test_a_long_job_lets_the_loop_run_between_pieces_and_keeps_order() -> None:
    async def scenario() -> tuple[list[str], int]:
        handoff = LoopHandOff(piece_seconds=0.001)
        handoff.attach(asyncio.get_running_loop())
        seen: list[str] = []
        turns = await LoopTurns.start()

        def slow(label: str) -> None:
            seen.append(label)
            burn(0.0005)

        handoff.call_in_pieces([lambda i=i: slow(f"job-{i}") for i in range(40)])
        assert handoff.pending  # 20 ms of work in pieces of 1 ms: not done yet
        ticks_at_start = turns.count
        handoff.call(lambda: seen.append("after"))  # on the loop's thread, yet it waits its turn
        while handoff.pending:
            await asyncio.sleep(0)
        turns.stop()
        return seen, turns.count - ticks_at_start

    seen, ticks = run(scenario())
    assert seen == [f"job-{i}" for i in range(40)] + ["after"]
    assert ticks >= 5  # other tasks ran between the pieces


def test_a_job_handed_over_before_the_loop_runs_in_pieces_once_it_is_attached() -> None:
    """In cluster mode the first list can arrive from a watch thread before the loop runs: the job
    waits, then runs in pieces like any other (it used to run in one go, seconds of loop time)."""
    handoff = LoopHandOff(piece_seconds=0.001)
    seen: list[str] = []
    handoff.call(lambda: seen.append("first"))
    handoff.call_in_pieces([lambda i=i: (seen.append(f"job-{i}"), burn(0.0005)) for i in range(20)])
    handoff.call(lambda: seen.append("last"))
    assert handoff.pending and seen == []

    async def scenario() -> int:
        handoff.attach(asyncio.get_running_loop())
        assert handoff.pending  # attach ran the first piece, not the whole job
        turns = await LoopTurns.start()
        while handoff.pending:
            await asyncio.sleep(0)
        turns.stop()
        return turns.count

    assert run(scenario()) >= 5  # other tasks ran between the pieces
    assert seen == ["first", *[f"job-{i}" for i in range(20)], "last"]


def test_after_each_piece_the_loop_runs_other_work_as_long_as_the_piece_took() -> None:
    """A request takes several turns of the loop (read, parse, run the app, write): one turn between
    pieces was not enough for it. Each piece here burns 2 ms; between two pieces a coroutine that
    only yields must get many turns, not one."""

    async def scenario() -> list[int]:
        handoff = LoopHandOff(piece_seconds=0.0)  # every step its own piece
        handoff.attach(asyncio.get_running_loop())
        at_piece: list[int] = []
        turns = await LoopTurns.start()

        def slow() -> None:
            at_piece.append(turns.count)
            burn(0.002)

        handoff.call_in_pieces([slow for _ in range(7)])
        while handoff.pending:
            await asyncio.sleep(0)
        turns.stop()
        return [b - a for a, b in zip(at_piece, at_piece[1:])]

    gaps = sorted(run(scenario()))
    assert gaps[len(gaps) // 2] >= 20, gaps  # one turn between pieces would give 1 or 2


@pytest.mark.parametrize("answering", [True, False])
def test_a_job_pauses_as_long_as_each_piece_only_while_a_request_is_answered(answering: bool) -> None:
    """Pausing as long as each piece took gives requests in flight their turns of the loop; with none
    in flight (at start, or between an HPA's queries) it only delays the job, which then waits just
    one turn of the loop (in which a new request is read)."""

    async def scenario() -> list[float]:
        handoff = LoopHandOff(piece_seconds=0.0, answering=lambda spent: answering)
        handoff.attach(asyncio.get_running_loop())
        pauses: list[float] = []
        schedule = handoff._schedule

        def recording(pause: float) -> None:
            pauses.append(pause)
            schedule(pause)

        handoff._schedule = recording  # type: ignore[method-assign]

        handoff.call_in_pieces([lambda: burn(0.003) for _ in range(4)])
        while handoff.pending:
            await asyncio.sleep(0)
        return pauses

    pauses = run(scenario())
    assert len(pauses) >= 3
    if answering:
        assert min(pauses) >= 0.003  # as long as the piece took
    else:
        assert pauses == [0.0] * len(pauses)


def test_a_failing_step_is_logged_and_the_job_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> list[int]:
        handoff = LoopHandOff(piece_seconds=0.0)  # every step its own piece
        handoff.attach(asyncio.get_running_loop())
        done: list[int] = []

        def step(i: int) -> None:
            if i == 2:
                raise OverflowError("int too large to convert to float")
            done.append(i)

        handoff.call_in_pieces([lambda i=i: step(i) for i in range(5)])
        while handoff.pending:
            await asyncio.sleep(0)
        return done

    with caplog.at_level(logging.ERROR, logger="prescaler.handoff"):
        assert run(scenario()) == [0, 1, 3, 4]
    assert "OverflowError" in caplog.text


def test_before_the_loop_a_job_runs_in_order_when_it_starts() -> None:
    handoff = LoopHandOff()
    seen: list[int] = []
    handoff.call_in_pieces([lambda i=i: seen.append(i) for i in range(3)])
    handoff.call(lambda: seen.append(99))
    assert seen == [] and handoff.pending

    async def start() -> None:
        handoff.attach(asyncio.get_running_loop())

    run(start())
    assert seen == [0, 1, 2, 99] and not handoff.pending


def test_a_large_resync_answers_queries_meanwhile_and_publishes_the_list_whole() -> None:
    """10 000 objects used to be applied in one go: seconds without an answer. Now the loop answers
    between pieces, and no half-applied list is ever published."""
    count = 300

    async def scenario() -> tuple[int, list[int]]:
        engine = Engine(clock=lambda: NOW, start_sources=False, rebuild_delay=0.0, snapshot_delay=0.0)
        engine._handoff.piece_seconds = 0.0005  # pieces of a step or two, to see many of them
        await engine.start()
        engine.resync("VirtualMetric", [metric("rps")])
        await settle(engine)
        answered_during = 0
        published_sizes: list[int] = []
        was_published = engine.publisher.on_published

        def on_published() -> None:
            published_sizes.append(engine.published.target_count("rps"))
            was_published()

        engine.publisher.on_published = on_published
        engine.resync("VirtualMetricEvent", [calendar(i) for i in range(count)])
        while engine._handoff.pending:
            engine.query("rps", "ns", parse_selector("resource=target-0"))
            answered_during += 1
            await asyncio.sleep(0)
        await settle(engine)
        await asyncio.gather(*(s.runner.fetch_once() for s in engine.events.values() if s.runner))
        await settle(engine)
        result = engine.query("rps", "ns", parse_selector(f"resource=target-{count - 1}"))
        assert isinstance(result, Values) and [v.value for v in result.values] == [count - 1]
        await engine.stop()
        return answered_during, published_sizes

    answered_during, published_sizes = run(scenario())
    assert answered_during >= 10
    assert published_sizes and all(size in (0, count) for size in published_sizes), published_sizes
