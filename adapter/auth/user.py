"""Authenticated identity, as Kubernetes' user.Info."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"
MASTERS_GROUP = "system:masters"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()  # sorted (key, values): hashable for caches
    uid: str = ""
    # How the identity was established: "front-proxy", "x509", "token", "token-file", "anonymous".
    method: str = field(default="anonymous", compare=False)

    @staticmethod
    def make(
        name: str,
        groups: list[str] | tuple[str, ...] = (),
        extra: dict[str, list[str]] | None = None,
        uid: str = "",
        method: str = "anonymous",
    ) -> UserInfo:
        frozen_extra = tuple(sorted((k, tuple(v)) for k, v in (extra or {}).items()))
        return UserInfo(name, tuple(groups), frozen_extra, uid, method)

    @property
    def extra_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.extra}

    def with_authenticated_group(self) -> UserInfo:
        """group.AuthenticatedGroupAdder: add system:authenticated unless anonymous or already there."""
        if self.name == ANONYMOUS_USER or AUTHENTICATED_GROUP in self.groups or UNAUTHENTICATED_GROUP in self.groups:
            return self
        return UserInfo(self.name, (*self.groups, AUTHENTICATED_GROUP), self.extra, self.uid, self.method)

    def to_scope(self) -> dict[str, Any]:
        """What the inner ASGI app finds in ``scope["user"]``."""
        return {
            "name": self.name,
            "groups": list(self.groups),
            "extra": self.extra_dict,
            "uid": self.uid,
            "method": self.method,
        }


ANONYMOUS = UserInfo(ANONYMOUS_USER, (UNAUTHENTICATED_GROUP,), (), "", "anonymous")
