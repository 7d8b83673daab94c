"""An event already loaded is not parsed again for a version of it whose spec cannot have changed.

prescaler writes each event's status every few seconds; the watch sends the whole object back each
time. The API server bumps metadata.generation on every spec change and never on a status write, so
the same uid, generation and labels mean the same spec."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapter import observability as obs
from adapter.pipeline import objects
from adapter.pipeline.objects import ObjectTable
from tests.helpers import entry, schedule_event

NOW = 1_900_000_000.0


def stored(generation: int = 1, uid: str = "uid-1", expression: str = "n", labels: dict | None = None) -> dict:
    """The event as the API server sends it: uid, generation, resourceVersion, managedFields, status."""
    items = [{"start": NOW, "end": NOW + 60, "values": {"n": 4}}]
    doc = schedule_event("e", items, [entry("ns", "t", expression)], labels=labels)
    doc["metadata"].update(
        uid=uid,
        generation=generation,
        resourceVersion=str(100 + generation),
        managedFields=[{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1"}],
    )
    return doc


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = objects.parse_event

    def counting(doc: Any) -> Any:
        seen.append(doc["metadata"]["name"])
        return real(doc)

    monkeypatch.setattr(objects, "parse_event", counting)
    return seen


def expressions(table: ObjectTable) -> list[str]:
    state = table.events["e"]
    assert state.vme is not None
    return [m.expression for m in state.vme.metrics]


def versions(outcome: str) -> float:
    return obs.REGISTRY.get_sample_value("prescaler_event_versions_total", {"outcome": outcome}) or 0.0


def test_a_status_write_coming_back_is_not_parsed_again(parses: list[str]) -> None:
    parsed, unchanged = versions("parsed"), versions("unchanged")
    table = ObjectTable()
    assert table.apply(stored()).changed
    echoed = copy.deepcopy(stored())
    echoed["metadata"]["resourceVersion"] = "555"  # a status write: new resourceVersion, same generation
    echoed["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    change = table.apply(echoed)
    assert not change.changed and not change.start and not change.stop
    assert parses == ["e"]
    assert table.feeds()[0].name == "e"  # still loaded, with its source
    assert (versions("parsed") - parsed, versions("unchanged") - unchanged) == (1, 1)  # what /metrics shows


def test_a_new_generation_is_parsed_and_loaded(parses: list[str]) -> None:
    table = ObjectTable()
    table.apply(stored())
    change = table.apply(stored(generation=2, expression="n * 3"))
    assert change.changed
    assert parses == ["e", "e"]
    assert expressions(table) == ["n * 3"]


def test_changed_labels_or_a_recreated_object_are_parsed_again(parses: list[str]) -> None:
    table = ObjectTable()
    table.apply(stored())
    table.apply(stored(labels={"team": "a"}))  # labels do not bump the generation, but parse reads them
    assert table.events["e"].vme is not None and table.events["e"].vme.labels == {"team": "a"}
    table.apply(stored(uid="uid-2", expression="n + 1"))  # deleted and created again: generation 1 again
    assert expressions(table) == ["n + 1"]
    assert parses == ["e", "e", "e"]


def test_objects_without_uid_or_generation_are_always_parsed(parses: list[str]) -> None:
    table = ObjectTable()
    doc = schedule_event("e", [], [entry("ns", "t", "n")])  # as a manifest file has it
    table.apply(doc)
    table.apply(copy.deepcopy(doc))
    assert parses == ["e", "e"]


def test_a_rejected_version_is_parsed_again_and_stays_rejected(parses: list[str]) -> None:
    table = ObjectTable()
    table.apply(stored(expression="n +"))
    assert table.events["e"].error
    table.apply(stored(expression="n +"))
    assert parses == ["e", "e"]
    assert table.events["e"].error
