"""Fixtures shared by the fast suite (`make test`).

Helpers live in modules under tests/ and are imported one way: `from tests.<module> import ...`.
A test module that needs a differently prepared fixture (a FakeKube with extra types or objects,
one shared by a whole module) defines its own with the same name, which overrides these.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.announcer_server import Announcer
from tests.fakekube import FakeKube


@pytest.fixture()
def fake() -> Iterator[FakeKube]:
    """An in-process Kubernetes API (CRDs, RBAC reviews, watches) for one test."""
    with FakeKube() as server:
        yield server


@pytest.fixture()
def announcer() -> Iterator[Announcer]:
    """The seed's announcement HTTP API on a free port; `set_items` changes what it announces."""
    server = Announcer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def fresh_failure_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the whole burst of source-failure log lines (a process-wide limit that
    earlier tests would otherwise use up: tests read those lines)."""
    from adapter.logs import BurstLimit
    from adapter.sources import runner

    monkeypatch.setattr(runner, "FAILURE_LOG", BurstLimit(runner.FAILURE_LOG.burst, runner.FAILURE_LOG.window))
