"""Local mode: HorizontalPodPrescaler documents in --manifests are checked against the HPA manifests
in the same files, and the result is logged when it changes."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from adapter.store.hpp_local import LocalHPPChecker
from adapter.store.manifests import ManifestStore

ROOT = Path(__file__).resolve().parents[2]


class Sink:
    def __init__(self) -> None:
        self.kinds: dict[str, list[Any]] = {}

    def resync(self, kind: str, docs: list[Any]) -> None:
        self.kinds[kind] = docs


def touch_later(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a visible change for the poller


def test_local_hpp_check_follows_the_hpa_file(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="prescaler.hpp")
    shutil.copy(ROOT / "examples/seed/horizontalpodprescaler.yaml", tmp_path / "hpp.yaml")
    shutil.copy(ROOT / "examples/seed/virtualmetric.yaml", tmp_path / "vm.yaml")
    hpa = yaml.safe_load((ROOT / "examples/hpa/service-a-hpa.yaml").read_text())
    sink = Sink()
    store = ManifestStore(sink, [str(tmp_path)])
    checker = LocalHPPChecker()
    store.on_documents = checker.update
    store.poll()
    key = ("service-a", "service-a")
    assert checker.conditions[key]["reason"] == "HPANotFound"
    assert [d["metadata"]["name"] for d in sink.kinds["VirtualMetric"]] == ["rps"]  # the rest is unaffected

    without = dict(hpa, spec=dict(hpa["spec"], metrics=[m for m in hpa["spec"]["metrics"] if m["type"] != "External"]))
    (tmp_path / "hpa.yaml").write_text(yaml.safe_dump(without))
    store.poll()
    cond = checker.conditions[key]
    assert (cond["status"], cond["reason"]) == ("False", "MetricMissing")
    assert "kubectl -n service-a patch hpa service-a-hpa --type=json" in cond["message"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "MetricMissing" in r.getMessage()]
    assert len(warnings) == 1 and "kubectl -n service-a patch hpa" in warnings[0].getMessage()

    store.poll()  # nothing changed: nothing logged again
    assert len([r for r in caplog.records if "MetricMissing" in r.getMessage()]) == 1

    touch_later(tmp_path / "hpa.yaml", yaml.safe_dump(hpa))
    store.poll()
    assert checker.conditions[key]["status"] == "True"


def test_invalid_local_hpp_is_reported_not_fatal(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "examples/seed/horizontalpodprescaler.yaml").read_text())
    del doc["spec"]["scaleTargetRef"]
    (tmp_path / "hpp.yaml").write_text(yaml.safe_dump(doc))
    shutil.copy(ROOT / "examples/seed/virtualmetric.yaml", tmp_path / "vm.yaml")
    sink = Sink()
    store = ManifestStore(sink, [str(tmp_path)])
    checker = LocalHPPChecker()
    store.on_documents = checker.update
    store.poll()
    cond = checker.conditions[("service-a", "service-a")]
    assert cond["reason"] == "InvalidSpec" and "spec.scaleTargetRef.name" in cond["message"]
    assert len(sink.kinds["VirtualMetric"]) == 1
