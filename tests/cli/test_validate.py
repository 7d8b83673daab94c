"""`prescaler validate FILE|DIR...`: schema, CEL, the server's parser and expressions, offline, with
exit codes for CI (0 ok, 1 invalid, 2 usage) and messages naming file, document, object and field."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.cli import main
from tests.logging_state import preserved_logging

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _logging_untouched() -> Iterator[None]:
    with preserved_logging():  # main() configures logging for the command it runs
        yield


VM: dict[str, Any] = {
    "apiVersion": "prescaler.pingpong.ai/v1",
    "kind": "VirtualMetric",
    "metadata": {"name": "rps"},
    "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum"},
}
VME: dict[str, Any] = {
    "apiVersion": "prescaler.pingpong.ai/v1",
    "kind": "VirtualMetricEvent",
    "metadata": {"name": "stage-vme"},
    "spec": {
        "source": {
            "schedule": {"items": [{"start": 1700545800, "end": 1700546400, "values": {"scheduledMessage": 50}}]}
        },
        "metrics": [
            {
                "name": "rps",
                "resource": {"name": "service-a", "namespace": "service-a"},
                "value": {"expression": "scheduledMessage * 2"},
            }
        ],
    },
}


def changed(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return out


def validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *docs: Any, args: tuple[str, ...] = ()
) -> tuple[int, str]:
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    code = main(["validate", *args, str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_valid_files_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, capsys, VM, VME)
    assert code == 0, out
    assert "valid: 2 prescaler object(s) checked, 0 error(s), 0 warning(s)" in out


def test_schema_error_names_file_document_object_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, capsys, VME, changed(VM, "spec.mergeStrategy", "Median"))
    assert code == 1
    [line] = [line for line in out.splitlines() if ": error: " in line]
    assert line.startswith(f"{tmp_path / 'manifests.yaml'}:")
    assert "document 2, VirtualMetric/rps: spec.mergeStrategy: 'Median' is not one of" in line


def test_cel_rule_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate(tmp_path, capsys, changed(changed(VM, "spec.min", 10), "spec.max", 1), VME)
    assert code == 1
    assert "VirtualMetric/rps: spec: min must not be greater than max" in out


def test_server_parser_rejections_the_schema_lets_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespaced = changed(VM, "metadata", {"name": "rps", "namespace": "default"})
    code, out = validate(tmp_path, capsys, namespaced, VME)
    assert code == 1
    assert "VirtualMetric/rps: metadata.namespace: VirtualMetric is cluster-scoped" in out


@pytest.mark.parametrize(
    "expression,expect",
    [
        ("scheduledMessage *", "spec.metrics[0].value.expression"),
        ("__import__('os').system('true')", "spec.metrics[0].value.expression"),
        ("unknownValue * 2", "unknownValue"),  # the schedule's items only provide scheduledMessage
    ],
)
def test_expressions_are_checked_like_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], expression: str, expect: str
) -> None:
    bad = changed(VME, "spec.metrics.0.value", {"expression": expression})
    code, out = validate(tmp_path, capsys, VM, bad)
    assert code == 1, out
    line = next(line for line in out.splitlines() if ": error: " in line)
    assert "VirtualMetricEvent/stage-vme" in line and expect in line


def test_unknown_kind_and_undefined_metric_warn_and_fail_only_when_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = changed(VM, "kind", "VirtualMetrics")
    code, out = validate(tmp_path, capsys, typo, VME)
    assert code == 0, out
    assert "warning: document 1, VirtualMetrics/rps: kind: unknown kind 'VirtualMetrics'" in out
    assert "did you mean VirtualMetric?" in out
    assert (
        "warning: document 2, VirtualMetricEvent/stage-vme: spec.metrics[0].name: no VirtualMetric in "
        "the given files serves metric 'rps'"
    ) in out
    code, out = validate(tmp_path, capsys, typo, VME, args=("--strict",))
    assert code == 1


def test_other_kinds_are_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}}
    code, out = validate(tmp_path, capsys, VM, VME, deployment, args=("--strict",))
    assert code == 0, out
    assert "1 other document(s) skipped" in out


def test_two_virtual_metrics_serving_one_name_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = changed(VM, "metadata", {"name": "rps-copy"})
    code, out = validate(tmp_path, capsys, VM, other, VME)
    assert code == 0
    assert "VirtualMetric/rps-copy: spec.name: metric 'rps' is also served by VirtualMetric/rps" in out


def test_invalid_yaml_is_an_error_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: VirtualMetric\nmetadata: {name: [\n")
    assert main(["validate", str(path)]) == 1
    assert f"{path}:3: error: invalid YAML" in capsys.readouterr().out


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["validate"])
    assert exit_info.value.code == 2


def test_missing_cel_fails_loudly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "celpy", None)  # import celpy -> ImportError
    code, out = validate(tmp_path, capsys, VM, VME)
    assert code == 2
    assert "CEL rules cannot be checked" in out


def test_directories_the_seed_and_the_local_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "examples" / "local")]) == 0, capsys.readouterr().out
    seed = sorted(p for p in (ROOT / "examples" / "seed").glob("virtualmetric*.yaml"))
    assert seed and main(["validate", *map(str, seed)]) == 0, capsys.readouterr().out


def test_the_whole_seed_including_its_horizontal_pod_prescaler(capsys: pytest.CaptureFixture[str]) -> None:
    """The seed's third kind is namespaced and known: checked, not warned about or called cluster-scoped."""
    assert main(["validate", "--strict", str(ROOT / "examples" / "seed")]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "3 prescaler object(s) checked" in out and "0 warning(s)" in out, out


def test_the_old_script_is_the_same_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(changed(VM, "spec.mergeStrategy", "Median")))
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "crds" / "validate.py"), str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1 and "spec.mergeStrategy" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "adapter.cli", "validate", str(ROOT / "examples" / "local")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


HUGE = int("9" * 400)  # a 400-digit YAML integer literal: float() of it raises OverflowError


@pytest.mark.parametrize(
    "kind,path,field",
    [
        ("vm", "spec.leadTime", "spec.leadTime"),
        ("vm", "spec.defaultValue", "spec.defaultValue"),
        ("vm", "spec.min", "spec.min"),
        ("vme", "spec.source.interval", "spec.source.interval"),
        ("vme", "spec.source.schedule.items.0.values.scheduledMessage", "items.0.values.scheduledMessage"),
        ("vme", "spec.source.schedule.items.0.start", "items.0.start"),
    ],
)
def test_huge_integer_literals_are_field_errors_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, path: str, field: str
) -> None:
    docs = (changed(VM, path, HUGE), VME) if kind == "vm" else (VM, changed(VME, path, HUGE))
    code, out = validate(tmp_path, capsys, *docs)
    assert code == 1, out
    errors = [line for line in out.splitlines() if ": error: " in line]
    assert errors and all(field in line for line in errors), out
    assert "Traceback" not in out and "OverflowError" not in out
    assert all(len(line) < 400 for line in errors), "the literal is shortened in the message"


def test_a_20_digit_lead_time_is_an_error_about_lead_time_not_min_max(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beyond int64, CEL could not read the spec and failed the min/max rule on it instead."""
    code, out = validate(tmp_path, capsys, changed(VM, "spec.leadTime", 99999999999999999999), VME)
    assert code == 1, out
    errors = [line for line in out.splitlines() if ": error: " in line]
    assert errors and all("spec.leadTime: 99999999999999999999" in line for line in errors), out
    assert "min must not be greater than max" not in out


def test_an_invalid_unquoted_date_is_an_error_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dates.yaml"
    path.write_text(
        yaml.safe_dump(VM)
        + "---\n"
        + yaml.safe_dump(VME).replace("  source:\n", "  source:\n    exclude: [2023-02-30]\n", 1)
    )
    line = path.read_text().splitlines().index("    exclude: [2023-02-30]") + 1
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert f"{path}:{line}: error: invalid YAML: invalid date or time 2023-02-30: day is out of range" in out.out


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *"])
def test_a_cron_that_never_occurs_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], cron: str) -> None:
    windows = [{"cron": cron, "duration": "10m", "values": {"scheduledMessage": 5}}]
    code, out = validate(tmp_path, capsys, VM, changed(VME, "spec.source.schedule", {"windows": windows}))
    assert code == 1, out
    assert f"spec.source.schedule.windows[0].cron: '{cron}' never occurs" in out
