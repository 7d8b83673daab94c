"""What the engine reports as status, completed by the status writer, fits the CRDs' status schema
(a structural schema would otherwise prune or reject it in a real cluster)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from adapter.labels import parse_selector
from adapter.store.status import complete_status
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def _validators():
    spec = importlib.util.spec_from_file_location("prescaler_crd_validate", CRD_DIR / "validate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses in the module look themselves up there
    spec.loader.exec_module(module)
    return module.load_validators(CRD_DIR), module.validate_documents


def test_engine_status_validates_against_the_crds() -> None:
    good = schedule_event(
        "good", [{"start": NOW, "end": NOW + 60, "values": {"n": 1}}], [entry("service-a", "service-a", "n / 0")]
    )
    bad = schedule_event(
        "bad", [{"start": NOW, "end": NOW + 60, "values": {"n": 1}}], [entry("service-a", "service-a", "n +")]
    )
    docs = [metric("rps"), metric("broken", mergeStrategy="Sum"), good, bad]
    docs[1]["spec"]["name"] = "rps"  # a duplicate metric name: rejected with a condition

    async def go():
        engine = await loaded_engine(docs)
        for i in range(25):  # queries for targets nothing feeds fill status.unknownTargets
            engine.query("rps", "service-a", parse_selector(f"resource={'x' * 60}-{i}"), NOW)
        statuses = engine.statuses()
        await engine.stop()
        return statuses

    statuses = run(go())
    validators, validate_documents = _validators()
    objects = []
    for doc in docs:
        generation, desired = statuses[(doc["kind"], doc["metadata"]["name"])]
        objects.append({**doc, "status": complete_status(generation, desired, {}, "2026-11-29T00:00:00Z")})
    assert validate_documents(objects, validators) == []
    served_by = objects[1]["status"]  # "broken" wins the name "rps" (no creationTimestamp: by name)
    assert len(served_by["unknownTargets"]) == 20 and served_by["metricName"] == "rps"
    assert {c["type"] for c in objects[2]["status"]["conditions"]} == {"Ready", "SourceHealthy", "ExpressionsValid"}
