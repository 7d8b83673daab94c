"""Event statuses kept between refreshes: a kept status is always the one a fresh computation makes.

The memo (adapter.pipeline.status.EventStatusMemo) keeps an event's status while everything it is made
of stays equal. These tests change every such input at random, one at a time, on a real engine's
events, and compare each status the memo hands out with a fresh `event_status`, and check that an
event nothing touched is not made again.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from typing import Any

import pytest

from adapter.engine import Engine
from adapter.pipeline.contributions import Contributions
from adapter.pipeline.objects import EventState
from adapter.pipeline.publish import Published
from adapter.pipeline.status import EventStatusMemo, event_status
from adapter.resources import KIND_EVENT
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event


def api_event(name: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": name},
        # Nothing listens there: the first fetch fails, and the test sets the health it wants.
        "spec": {
            "source": {"api": {"url": "http://127.0.0.1:9/items"}, "interval": "5s"},
            "metrics": [entry("ns", resource, "n")],
        },
    }


async def engine_with_events() -> Engine:
    docs = [metric(), metric("other")]
    for i in range(6):
        docs.append(
            schedule_event(
                f"sched{i}", [{"start": NOW, "end": NOW + 600, "values": {"n": i}}], [entry("ns", f"s{i}", "n")]
            )
        )
        docs.append(api_event(f"api{i}", f"a{i}"))
    return await loaded_engine(docs)


def mutate(rng: random.Random, state: EventState, world: dict[str, Any]) -> str:
    """Change one input of `state`'s status (or of the world: the time, the published metrics)."""
    runner = state.runner
    health = runner.health if runner else None
    choice = rng.randrange(12)
    if choice == 0 and health is not None:
        health.last_success = world["now"] - rng.choice([0.0, 3.0, 50.0, 500.0])
        return "last_success"
    if choice == 1 and health is not None:
        health.last_error = rng.choice([None, "connection refused", "HTTP 500"])
        return "last_error"
    if choice == 2 and health is not None:
        health.item_count = rng.randrange(4)
        return "item_count"
    if choice == 3 and health is not None:
        health.warnings.append(rng.choice(["w1", "w2"]))  # mutated in place, as the runner does
        return "warnings appended"
    if choice == 4 and health is not None:
        health.last_attempt = rng.choice([None, world["now"]])
        return "last_attempt"
    if choice == 5:
        state.generation += 1
        return "generation"
    if choice == 6:
        state.error = rng.choice([None, None, "spec.metrics[0]: bad"])
        return "error"
    if choice == 7:
        dropped = rng.randrange(3)
        state.contributions = Contributions({}, dropped, tuple(f"why {k}" for k in range(dropped)))
        return "contributions"
    if choice == 8:
        state.unreachable = rng.choice([(), ("ns/Bad_Name: not a label value",)])
        return "unreachable"
    if choice == 9:
        world["now"] += rng.choice([1.0, 40.0, 1000.0])  # staleness may flip
        return "time"
    if choice == 10:
        world["published"] = rng.choice(world["publications"])  # "other" served or not
        return "published metrics"
    if runner is not None:
        runner.source.last_effects = rng.choice([[], [{"regressor": "r", "effect": rng.random()}]])  # type: ignore[attr-defined]
        return "effects"
    return "nothing"


@pytest.mark.parametrize("seed", range(4))
def test_a_kept_status_is_the_one_a_fresh_computation_makes(seed: int) -> None:
    rng = random.Random(seed)

    async def go() -> None:
        engine = await engine_with_events()
        try:
            served = engine.published
            assert "other" in served.metrics
            without_other = dataclasses.replace(
                served, metrics={k: v for k, v in served.metrics.items() if k != "other"}
            )
            world: dict[str, Any] = {"now": NOW, "published": served, "publications": [served, without_other]}
            states = dict(engine.events)
            for state in states.values():  # half the events name a metric the other publication lacks
                if rng.random() < 0.5:
                    state.entries = [dataclasses.replace(plan, metric="other") for plan in state.entries]
            memo = EventStatusMemo()
            kept = made = 0
            for _ in range(300):
                before = {name: memo.status(name, s, world["published"], world["now"])[1] for name, s in states.items()}
                name = rng.choice(sorted(states))
                what = mutate(rng, states[name], world)
                world_changed = what in ("time", "published metrics")
                for other, state in states.items():
                    published: Published = world["published"]
                    _, status, again = memo.status(other, state, published, world["now"])
                    assert status == event_status(state, published, world["now"]), (other, what)
                    if other != name and not world_changed:
                        assert not again, (other, what)  # nothing it is made of changed: kept
                        assert status is before[other]
                    kept += not again
                    made += again
            assert kept > made > 50  # both paths ran, and keeping is the common case
        finally:
            await engine.stop()

    run(go())


def test_a_refresh_makes_again_only_what_changed_and_still_warns_about_new_problems(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def go() -> None:
        engine = await engine_with_events()
        try:
            first = engine.statuses()
            again = engine.statuses()
            for key, (_, status) in first.items():
                if key[0] == KIND_EVENT:
                    assert again[key][1] is status  # nothing changed: every event status kept
            state = engine.events["api3"]
            assert state.runner is not None
            state.runner.health.last_error = "HTTP 503"
            state.unreachable = ("ns/Bad_Name: not a label value",)
            caplog.clear()  # the failed first fetches were logged
            with caplog.at_level(logging.WARNING, logger="prescaler"):
                third = engine.statuses()
            changed = [k for k in first if k[0] == KIND_EVENT and third[k][1] is not first[k][1]]
            assert changed == [(KIND_EVENT, "api3")]
            conditions = {c["type"]: c for c in third[(KIND_EVENT, "api3")][1]["conditions"]}
            assert conditions["SourceHealthy"]["message"] == "HTTP 503"
            assert conditions["ExpressionsValid"]["reason"] == "UnreachableTarget"
            assert [r.getMessage() for r in caplog.records] == [
                "VirtualMetricEvent api3: no HPA can query target ns/Bad_Name: not a label value"
            ]
        finally:
            await engine.stop()

    run(go())


def test_events_are_checked_again_when_the_defined_metrics_change_though_their_statuses_did_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The VirtualMetric `other` stops being defined (here: its state turns invalid, as a bad edit
    leaves it). Until the next publication, the statuses of the events that feed it stay as they were
    (the snapshot still serves it), yet the warning must come at the next refresh."""

    async def go() -> None:
        engine = await engine_with_events()
        try:
            engine.events["sched2"].entries = [
                dataclasses.replace(plan, metric="other") for plan in engine.events["sched2"].entries
            ]
            first = engine.statuses()
            engine.metrics["other"].error = "spec.defaultValue: not a number"  # no publication follows
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="prescaler"):
                second = engine.statuses()
            assert second[(KIND_EVENT, "sched2")][1] is first[(KIND_EVENT, "sched2")][1]  # the status is kept
            assert [r.getMessage() for r in caplog.records] == [
                "VirtualMetricEvent sched2: names metric 'other', which no VirtualMetric defines: it contributes nothing"
            ]
        finally:
            await engine.stop()

    run(go())
