"""Cluster mode lists the objects before the rest of the server is built, so the API server's answer
(most of a second for 100 000 targets) overlaps the server's own set-up; a set-up that fails stops
the listing again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter import cli
from adapter.auth import factory
from tests.fakekube import FakeKube


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as server:
        server.set_auth_configmap({})
        yield server


def serve_args(fake: FakeKube, tmp_path: Path) -> Any:
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
    return cli.build_parser().parse_args(["serve", "--kubeconfig", str(kubeconfig), "--secure-port", "0"])


def listed(fake: FakeKube) -> bool:
    return bool(fake.requests_matching("GET", r"/virtualmetricevents$"))


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kube-watch-") and t.is_alive()]


class Stop(Exception):
    """Ends build_app once the test has seen what it needs (build_app then stops the listing)."""


def test_the_objects_are_being_listed_before_auth_and_the_app_are_built(
    fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def build_auth(args: Any) -> Any:
        # The listing runs on its own thread: it reaches the fake while auth is being built. (Before,
        # the store started in the lifespan, after auth and the app: this would time out.)
        FakeKube.wait_for(lambda: listed(fake), 10)
        raise Stop()

    monkeypatch.setattr(factory, "build_auth", build_auth)
    with pytest.raises(Stop):
        cli.build_app(serve_args(fake, tmp_path))


def test_a_set_up_that_fails_after_the_listing_started_stops_it(
    fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_auth(args: Any) -> Any:
        FakeKube.wait_for(lambda: watch_threads(), 10)
        raise ValueError("--client-ca-file: no such file")

    monkeypatch.setattr(factory, "build_auth", broken_auth)
    before = set(watch_threads())
    with pytest.raises(ValueError, match="client-ca-file"):
        cli.build_app(serve_args(fake, tmp_path))
    assert FakeKube.wait_for(lambda: not (set(watch_threads()) - before), 10)
