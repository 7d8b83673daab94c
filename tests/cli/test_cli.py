"""The `prescaler` command line: help for everything, one flag name per thing, one line per failure."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from adapter.cli import HelpFormatter, build_parser, subcommands
from tests.shared_data import shared_path

ROOT = Path(__file__).resolve().parents[2]
NASA = "data/traces/nasa_http_jul1995_1min.csv"


def prescaler(*argv: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def assert_one_clear_line(stderr: str, prefix: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, stderr


# ------------------------------------------------------------------ help


def test_every_subcommand_has_a_description_and_every_flag_help_and_a_default() -> None:
    parser = build_parser()
    commands = subcommands(parser)
    assert {"serve", "validate", "certs", "forecast", "backtest", "simulate", "preview", "demo-announcer"} <= set(
        commands
    )
    problems = []
    for name, sub in commands.items():
        if not sub.description or "``" in sub.description:
            problems.append(f"{name}: no description (or a raw docstring)")
        formatter = HelpFormatter(prog=sub.prog)
        visible = {a.dest for a in sub._actions if a.help != argparse.SUPPRESS}
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = "/".join(action.option_strings) or action.dest
            if action.help == argparse.SUPPRESS:
                # A hidden flag must be an alias of a visible one (an old name kept for scripts).
                if action.dest not in visible:
                    problems.append(f"{name} {flag}: hidden but not an alias")
                continue
            if not action.help:
                problems.append(f"{name} {flag}: no help")
                continue
            shown = formatter._get_help_string(action) or ""
            if action.option_strings and action.nargs != 0 and not ("default" in shown or "required" in shown):
                problems.append(f"{name} {flag}: no default shown ({shown!r})")
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
            parser.parse_args([name, "--help"])
        assert exit_info.value.code == 0
        assert out.getvalue().startswith(f"usage: prescaler {name}")
    assert not problems, "\n".join(problems)


def test_certs_help_is_prose_not_a_docstring() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["certs", "--help"])
    assert "``" not in out.getvalue() and "(default: prescaler)" in out.getvalue()


def test_old_flag_names_still_work_as_hidden_aliases() -> None:
    parser = build_parser()
    old = parser.parse_args(["backtest", "--trace", "x.csv", "--horizon", "1h"])
    new = parser.parse_args(["backtest", "--history", "x.csv", "--horizon", "1h"])
    assert old.history == new.history == "x.csv"
    preview_old = parser.parse_args(
        ["preview", "--manifests", "m", "--metric", "rps", "--namespace", "n", "--resource", "r", "--for", "30m"]
    )
    preview_new = parser.parse_args(
        ["preview", "--manifests", "m", "--metric", "rps", "--namespace", "n", "--resource", "r", "--duration", "30m"]
    )
    assert preview_old.duration == preview_new.duration == "30m"
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit):
        parser.parse_args(["backtest", "--help"])
    assert "--trace" not in help_text.getvalue() and "--history" in help_text.getvalue()


def test_backtest_without_history_is_a_usage_error() -> None:
    result = prescaler("backtest", "--horizon", "1h")
    assert result.returncode == 2
    assert_one_clear_line(result.stderr, "prescaler backtest:")


# ------------------------------------------------------------------ one line and an exit code


def test_serve_without_cluster_or_manifests_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "KUBECONFIG"))}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    result = prescaler("serve", "--secure-port", "0", "--bind-address", "127.0.0.1", env=env, timeout=60)
    assert result.returncode == 2
    assert_one_clear_line(result.stderr, "prescaler serve:")
    assert "--manifests" in result.stderr and "--kubeconfig" in result.stderr


def test_forecast_into_a_closed_pipe_is_one_line(tmp_path: Path) -> None:
    """`prescaler forecast ... | head -1`: the reader goes away while output is still coming."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapter.cli",
            "forecast",
            "--history",
            str(shared_path(NASA)),
            "--horizon",
            "300h",
            "--model",
            "seasonalNaive",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith("timestamp,")
    proc.stdout.close()
    try:
        stderr = proc.stderr.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 141
    assert_one_clear_line(stderr, "prescaler forecast:")
    assert "broken pipe" in stderr


@pytest.fixture
def busy_port() -> object:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_on_a_busy_port_is_one_line(busy_port: int) -> None:
    result = prescaler(
        "serve",
        "--manifests",
        "examples/local",
        "--secure-port",
        str(busy_port),
        "--bind-address",
        "127.0.0.1",
        timeout=60,
    )
    assert result.returncode == 1
    assert_one_clear_line(result.stderr, "prescaler serve:")
    assert f"cannot listen on 127.0.0.1:{busy_port}" in result.stderr


def test_demo_announcer_on_a_busy_port_is_one_line(busy_port: int) -> None:
    """`make run` starts the announcer first: a second `make run` hits its port before the server's."""
    result = prescaler("demo-announcer", "--port", str(busy_port), timeout=60)
    assert result.returncode == 1
    assert_one_clear_line(result.stderr, "prescaler demo-announcer:")
    assert "cannot listen" in result.stderr
