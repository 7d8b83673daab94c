"""The status board: coalesced refreshes, computed in pieces on the loop so the loop stays free."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from adapter.pipeline.status import Statuses
from adapter.status_board import StatusBoard
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event


def test_a_refresh_in_pieces_lets_other_work_run_between_pieces_and_shows_only_complete_sets() -> None:
    log: list[str] = []
    version = [1]

    def pieces() -> Iterator[Statuses]:
        v = version[0]
        for i in range(3):
            log.append(f"piece {i}")
            yield {("VirtualMetricEvent", f"e{i}"): (v, {"version": v})}

    async def go() -> tuple[list[Statuses], list[str]]:
        board = StatusBoard(lambda: {}, delay=0.0, pieces=pieces)
        board.attach(asyncio.get_running_loop())
        seen: list[Statuses] = []
        board.listen(lambda: seen.append(board.current()))

        async def other_work() -> None:
            for _ in range(10):
                log.append("request")
                await asyncio.sleep(0)

        board.changed()
        await asyncio.gather(other_work(), asyncio.sleep(0.05))
        version[0] = 2
        board.changed()
        await asyncio.sleep(0.05)
        board.close()
        return seen, log

    seen, log = run(go())
    assert [len(s) for s in seen] == [3, 3]  # listeners see whole sets only
    assert {v for _, (v, _) in seen[1].items()} == {2}
    between = log[log.index("piece 0") : log.index("piece 2")]
    assert "request" in between, log  # requests ran between the pieces of one refresh


def test_a_change_during_a_refresh_in_pieces_is_not_lost() -> None:
    version = [1]

    def pieces() -> Iterator[Statuses]:
        v = version[0]
        yield {("VirtualMetric", "a"): (v, {})}
        yield {("VirtualMetric", "b"): (v, {})}

    async def go() -> Statuses:
        board = StatusBoard(lambda: {}, delay=0.0, pieces=pieces)
        board.attach(asyncio.get_running_loop())
        board.changed()
        await asyncio.sleep(0.001)  # the refresh has started and read version 1
        version[0] = 2
        board.changed()  # arrives while the refresh is under way
        for _ in range(50):
            await asyncio.sleep(0.001)
            if board.current() and board.current()[("VirtualMetric", "b")][0] == 2:
                break
        board.close()
        return board.current()

    statuses = run(go())
    assert statuses[("VirtualMetric", "a")][0] == 2 and statuses[("VirtualMetric", "b")][0] == 2


def test_engine_status_pieces_together_are_every_status() -> None:
    events = [
        schedule_event(f"ev{i}", [{"start": NOW, "end": NOW + 600, "values": {"n": 1}}], [entry("ns", f"s{i}", "n")])
        for i in range(250)
    ]

    async def go() -> tuple[list[int], Statuses, Statuses]:
        engine = await loaded_engine([metric(), *events])
        sizes = [len(piece) for piece in engine.status_pieces()]
        whole = engine.statuses()
        engine.status.changed()
        for _ in range(200):  # the board's own refresh (in pieces) arrives at the same set
            await asyncio.sleep(0.01)
            if len(engine.status.current()) == len(whole):
                break
        board = engine.status.current()
        await engine.stop()
        return sizes, whole, board

    sizes, whole, board = run(go())
    assert sizes == [1] + [20] * 12 + [10]  # the metric, then events a piece (STATUS_PIECE) at a time
    assert len(whole) == 251 and set(board) == set(whole)
    assert all(whole[k][1]["conditions"] == board[k][1]["conditions"] for k in whole)
