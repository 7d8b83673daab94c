"""The server records the requests it answers; long jobs on the loop pause for them only then."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.engine import Engine
from adapter.handoff import RequestActivity
from adapter.serving.inflight import CountRequests
from tests.helpers import run


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_requests_are_counted_while_they_are_answered_and_not_after() -> None:
    activity = RequestActivity()
    seen: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(activity.in_flight)
        if scope.get("path") == "/boom":
            raise RuntimeError("boom")

    counting = CountRequests(app, activity)

    async def scenario() -> None:
        await counting({"type": "http", "path": "/apis"}, None, None)
        with pytest.raises(RuntimeError):
            await counting({"type": "http", "path": "/boom"}, None, None)
        await counting({"type": "lifespan"}, None, None)  # not a request

    run(scenario())
    assert seen == [1, 1, 0]
    assert activity.in_flight == 0


def test_a_request_counts_as_recent_for_a_short_while_and_for_as_long_as_the_piece_took() -> None:
    clock = Clock()
    activity = RequestActivity(clock)
    assert not activity.recent(0.002)  # none yet
    activity.started()
    assert activity.recent(0.0)  # in flight
    activity.finished()
    clock.now += RequestActivity.RECENT_SECONDS / 2
    assert activity.recent(0.0)
    clock.now += RequestActivity.RECENT_SECONDS
    assert not activity.recent(0.0)
    # A piece of 30 ms blocked the loop: requests that came meanwhile wait unread, so one started just
    # before the piece still says "busy" when it ends.
    assert activity.recent(0.03)


def test_the_engine_pauses_long_work_for_requests_only_while_there_are_some() -> None:
    engine = Engine(start_sources=False)
    assert engine._handoff.pause_after(0.004) == 0.0
    engine.requests.started()
    assert engine._handoff.pause_after(0.004) == 0.004
    engine.requests.finished()
    assert engine._handoff.pause_after(0.004) == 0.004  # just now: more are likely coming
