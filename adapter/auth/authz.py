"""Delegated authorization (docs/api.md §6.3): privileged group, always-allowed paths, SubjectAccessReview.

SAR decisions (allow and deny) are cached ``ttl`` seconds keyed by the full review spec, and
concurrent identical reviews are coalesced, so a warm request costs one dict lookup.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from adapter.auth.attributes import RequestAttributes
from adapter.auth.cache import Coalescer, TTLCache
from adapter.auth.kubeapi import KubeAPIError, KubeAuthAPI
from adapter.auth.user import MASTERS_GROUP, UserInfo

log = logging.getLogger(__name__)

DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
SAR_ALLOW_TTL_SECONDS = 10.0
SAR_DENY_TTL_SECONDS = 10.0
# Attributes built from a longer path + query are cached under a digest of the review spec: the
# cache holds 8192 entries, and anonymous requests with 64 KB URLs would otherwise pin 0.5 GB.
_INLINE_KEY_MAX_SIZE = 1024


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class AuthorizationError(Exception):
    """The authorizer could not decide (SAR failed) -> 500."""


class Authorizer(Protocol):
    async def authorize(self, user: UserInfo, attrs: RequestAttributes) -> Decision: ...


class AlwaysAllowAuthorizer:
    """Local mode without a cluster: everything is allowed."""

    async def authorize(self, user: UserInfo, attrs: RequestAttributes) -> Decision:
        return Decision(True, "AlwaysAllow")


class PathMatcher:
    """``--authorization-always-allow-paths``: exact paths, or prefixes written with a trailing ``*``."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.exact = frozenset(p for p in patterns if p and not p.endswith("*"))
        self.prefixes = tuple(p[:-1] for p in patterns if p.endswith("*"))

    def matches(self, path: str) -> bool:
        return path in self.exact or any(path.startswith(p) for p in self.prefixes)


def sar_spec(user: UserInfo, attrs: RequestAttributes) -> dict[str, Any]:
    spec: dict[str, Any] = dict(attrs.sar_attributes())
    spec["user"] = user.name
    spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = user.extra_dict
    if user.uid:
        spec["uid"] = user.uid
    return spec


class DelegatingAuthorizer:
    def __init__(
        self,
        api: KubeAuthAPI | None,
        always_allow_paths: Sequence[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
        always_allow_groups: Sequence[str] = (MASTERS_GROUP,),
        *,
        allow_ttl: float = SAR_ALLOW_TTL_SECONDS,
        deny_ttl: float = SAR_DENY_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.paths = PathMatcher(always_allow_paths)
        self.groups = frozenset(always_allow_groups)
        self.allow_ttl = allow_ttl
        self.deny_ttl = deny_ttl
        self._cache: TTLCache[Decision] = TTLCache(max_entries=8192, clock=clock)
        self._coalescer: Coalescer[Decision] = Coalescer()
        self.reviews = 0  # SARs actually sent

    async def authorize(self, user: UserInfo, attrs: RequestAttributes) -> Decision:
        if self.groups and not self.groups.isdisjoint(user.groups):
            return Decision(True, "privileged group")
        if not attrs.resource_request and self.paths.matches(attrs.path):
            return Decision(True, "always allowed path")
        if self.api is None:
            return Decision(False, "no authorizer configured")
        key: Any = (user, attrs)
        if attrs.size > _INLINE_KEY_MAX_SIZE:
            key = hashlib.sha256(json.dumps(sar_spec(user, attrs), sort_keys=True).encode()).digest()
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        return await self._coalescer.run(key, lambda: self._review(key, user, attrs))

    async def _review(self, key: Any, user: UserInfo, attrs: RequestAttributes) -> Decision:
        assert self.api is not None
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": sar_spec(user, attrs)}
        self.reviews += 1
        try:
            review = await asyncio.to_thread(self.api.create_subject_access_review, body)
        except KubeAPIError as exc:
            raise AuthorizationError(str(exc)) from None
        # Checked as Go's decoder would: a status that is not an object, or an "allowed" that is not
        # a boolean (the string "false" is truthy), is an error (500), never an allow.
        status = review.get("status") if isinstance(review, dict) else None
        if status is None:
            status = {}
        if not isinstance(status, dict):
            raise AuthorizationError("SubjectAccessReview answer: status is not an object")
        allowed, denied = status.get("allowed", False), status.get("denied", False)
        if not isinstance(allowed, bool) or not isinstance(denied, bool):
            raise AuthorizationError("SubjectAccessReview answer: status.allowed/denied is not a boolean")
        reason = str(status.get("reason") or "")
        if status.get("evaluationError"):
            log.info("SubjectAccessReview evaluation error: %s", status["evaluationError"])
        if allowed and denied:
            # webhook.go: DecisionDeny together with this error, which WithAuthorization answers
            # with 500 InternalError (not cached here: errors never are).
            raise AuthorizationError("webhook subject access review returned both allow and deny response")
        decision = Decision(allowed, reason)
        self._cache.set(key, decision, self.allow_ttl if allowed else self.deny_ttl)
        return decision
