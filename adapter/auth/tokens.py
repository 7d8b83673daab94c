"""Bearer token authenticators: kube-apiserver's static token file and TokenReview (cached 10 s).

Both answer ``await authenticate(token)`` with a UserInfo, or None for "not my token / invalid".
TokenReview transport failures raise :class:`TokenReviewError` (never cached, so a short API outage
does not lock users out for the cache TTL).
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import logging
import time
from collections.abc import Callable
from typing import Any

from adapter.auth.cache import Coalescer, TTLCache
from adapter.auth.kubeapi import KubeAPIError, KubeAuthAPI
from adapter.auth.user import UserInfo

log = logging.getLogger(__name__)

TOKEN_REVIEW_TTL_SECONDS = 10.0  # AS DelegatingAuthenticationOptions CacheTTL (allow and deny alike)


class TokenReviewError(Exception):
    """The TokenReview could not be performed."""


def parse_token_file(text: str, source: str = "token file") -> dict[str, UserInfo]:
    """kube-apiserver ``--token-auth-file`` CSV: ``token,user,uid[,"group1,group2"]`` per line."""
    tokens: dict[str, UserInfo] = {}
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    for line_no, record in enumerate(reader, start=1):
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if record[0].lstrip().startswith("#"):
            continue
        if len(record) < 3:
            raise ValueError(
                f"{source} line {line_no}: must have at least 3 columns (token, user name, user uid), "
                f"found {len(record)}"
            )
        token, name, uid = (field.strip() for field in record[:3])
        if not token:
            log.warning("%s line %d: empty token, skipped", source, line_no)
            continue
        if not name:
            raise ValueError(f"{source} line {line_no}: empty user name")
        groups = [g.strip() for g in record[3].split(",") if g.strip()] if len(record) > 3 else []
        if token in tokens:
            log.warning("%s line %d: duplicate token, the later line wins", source, line_no)
        tokens[token] = UserInfo.make(name, groups, uid=uid, method="token-file")
    return tokens


class StaticTokenAuthenticator:
    def __init__(self, tokens: dict[str, UserInfo]) -> None:
        self._tokens = tokens

    @classmethod
    def from_file(cls, path: str) -> StaticTokenAuthenticator:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--token-auth-file {path}: {exc}") from None
        return cls(parse_token_file(text, f"--token-auth-file {path}"))

    async def authenticate(self, token: str) -> UserInfo | None:
        return self._tokens.get(token)


def _user_from_review(review: dict[str, Any]) -> UserInfo | None:
    """The user of a TokenReview answer; None when not authenticated.

    Types are checked as Go's decoder checks them: an answer it cannot decode is an error (401, not
    cached), never a user. Before, ``"authenticated": "false"`` (a string) counted as true, a
    string of groups became one group per character, and a non-object raised AttributeError (500).
    """
    status = review.get("status") if isinstance(review, dict) else None
    if status is None:
        status = {}
    if not isinstance(status, dict):
        raise TokenReviewError("TokenReview answer: status is not an object")
    authenticated = status.get("authenticated", False)
    if not isinstance(authenticated, bool):
        raise TokenReviewError("TokenReview answer: status.authenticated is not a boolean")
    if not authenticated:
        if status.get("error"):
            log.info("TokenReview rejected a token: %s", status["error"])
        return None
    user = status.get("user") or {}
    if not isinstance(user, dict):
        raise TokenReviewError("TokenReview answer: status.user is not an object")
    name, uid = user.get("username") or "", user.get("uid") or ""
    groups, extra = user.get("groups") or [], user.get("extra") or {}
    if not (
        isinstance(name, str)
        and isinstance(uid, str)
        and isinstance(groups, list)
        and all(isinstance(g, str) for g in groups)
        and isinstance(extra, dict)
        and all(isinstance(v, list | None) and all(isinstance(x, str) for x in v or []) for v in extra.values())
    ):
        raise TokenReviewError("TokenReview answer: status.user has fields of the wrong type")
    if not name:
        return None
    return UserInfo.make(name, groups, {str(k): list(v or []) for k, v in extra.items()}, uid, "token")


class TokenReviewAuthenticator:
    """authentication.k8s.io/v1 TokenReview, cached ``ttl`` seconds for both outcomes."""

    def __init__(
        self,
        api: KubeAuthAPI,
        ttl: float = TOKEN_REVIEW_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        audiences: list[str] | None = None,
    ) -> None:
        self._api = api
        self._ttl = ttl
        self._audiences = list(audiences or [])
        # Keyed by a hash so raw tokens are not kept in memory longer than the request.
        self._cache: TTLCache[tuple[UserInfo | None]] = TTLCache(clock=clock)
        self._coalescer: Coalescer[UserInfo | None] = Coalescer()
        self.reviews = 0  # number of TokenReviews actually sent (observability, tests)

    async def authenticate(self, token: str) -> UserInfo | None:
        key = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        hit = self._cache.get(key)
        if hit is not None:
            return hit[0]
        return await self._coalescer.run(key, lambda: self._review(key, token))

    async def _review(self, key: bytes, token: str) -> UserInfo | None:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        self.reviews += 1
        try:
            review = await asyncio.to_thread(self._api.create_token_review, body)
        except KubeAPIError as exc:
            raise TokenReviewError(str(exc)) from None
        user = _user_from_review(review)
        self._cache.set(key, (user,), self._ttl)
        return user
