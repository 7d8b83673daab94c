"""Logs like a Kubernetes component: --v levels, --logging-format=text|json, one namespace, the
access log through the same formatter."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter import logs
from tests.logging_state import preserved_logging
from tests.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    with preserved_logging():
        yield


def emit_everything() -> None:
    logging.getLogger("adapter.engine").debug("engine debug")
    logging.getLogger("adapter.engine").info("engine info")
    logging.getLogger("prescaler.sources").warning("source warning")
    logging.getLogger("httpx").debug("httpx debug")
    logging.getLogger("httpx").info("httpx info")
    logging.getLogger("kubernetes.client.rest").debug("kube debug")
    logging.getLogger("uvicorn.error").info("uvicorn info")
    logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/healthz", "1.1", 200)


def messages(verbosity: int, restore: None) -> list[dict[str, object]]:
    stream = io.StringIO()
    logs.configure(verbosity, "json", stream)
    emit_everything()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize("verbosity", [0, 1, 2])
def test_levels_zero_to_two_are_quiet(verbosity: int, restore_logging: None) -> None:
    shown = {m["msg"] for m in messages(verbosity, restore_logging)}
    assert "source warning" in shown
    assert ("engine info" in shown) == (verbosity >= 1)
    assert not shown & {"engine debug", "httpx debug", "httpx info", "kube debug", "uvicorn info"}
    assert not any(str(m).startswith("127.0.0.1") for m in shown)  # no access log below 3


def test_level_three_adds_our_debug_and_the_access_log_level_six_library_debug(restore_logging: None) -> None:
    shown = {m["msg"] for m in messages(3, restore_logging)}
    assert {"engine debug", "engine info"} <= shown and "httpx debug" not in shown
    assert any("/healthz" in str(m) for m in shown)
    shown = {m["msg"] for m in messages(6, restore_logging)}
    assert {"httpx debug", "kube debug", "uvicorn info"} <= shown


def test_one_namespace_and_access_fields(restore_logging: None) -> None:
    found = messages(6, restore_logging)
    assert {m["logger"] for m in found} <= {
        "prescaler.engine",
        "prescaler.sources",
        "prescaler.http",
        "prescaler.http.access",
        "httpx",
        "kubernetes.client.rest",
    }
    access = next(m for m in found if m["logger"] == "prescaler.http.access")
    assert (access["method"], access["path"], access["status"]) == ("GET", "/healthz", 200)
    assert all({"ts", "level", "caller", "msg", "v"} <= set(m) for m in found)


def test_text_format(restore_logging: None) -> None:
    stream = io.StringIO()
    logs.configure(1, "text", stream)
    logging.getLogger("adapter.store.kube").info("watching %s", "things")
    line = stream.getvalue().strip()
    assert line.endswith("INFO prescaler.store.kube: watching things") and line[:4].isdigit()


def test_served_process_logs_json_only_including_the_access_log(tmp_path: Path) -> None:
    with ServeProcess([ROOT / "examples" / "local"], tmp_path, "--v=3", "--logging-format=json") as server:
        assert server.get("/healthz").status_code == 200
        server.stop()
        lines = [line for line in server.log().splitlines() if line.strip()]
    docs = []
    for line in lines:
        try:
            docs.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON log line: {line!r}")
    assert all(str(d["logger"]).startswith("prescaler") for d in docs), {d["logger"] for d in docs}
    assert any(
        d["logger"] == "prescaler.http.access" and d.get("path") == "/healthz" and d.get("status") == 200 for d in docs
    ), lines


def test_served_process_at_v2_has_no_library_lines(tmp_path: Path) -> None:
    with ServeProcess([ROOT / "examples" / "local"], tmp_path, "--v=2") as server:
        assert server.get("/healthz").status_code == 200
        server.stop()
        text = server.log()
    names = {line.split()[2].rstrip(":") for line in text.splitlines() if line[:4].isdigit()}
    assert names and all(name.startswith("prescaler") for name in names), names
    assert " DEBUG " not in text and "/healthz" not in text
