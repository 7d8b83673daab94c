"""Delegated authentication, in the order of Kubernetes' delegating authenticator (docs/api.md §6.2).

1. Front-proxy: the TLS client certificate verifies against the requestheader CA (clientAuth usage,
   CN in allowed names when that list is set) -> identity from the configured headers.
2. Direct client certificate verified against the client CA -> user = CN, groups = O.
3. Bearer token: static token file, then TokenReview.
Then ``system:authenticated`` is added.  A certificate or token that fails every authenticator is an
error -> 401 (a bad front-proxy certificate is *not* "no opinion").  No credential at all ->
anonymous, when anonymous access is enabled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from adapter.auth.cache import TTLCache
from adapter.auth.config import AuthnConfig, DynamicAuthnConfig, RequestHeaderConfig
from adapter.auth.tokens import TokenReviewError
from adapter.auth.user import ANONYMOUS, UserInfo
from adapter.auth.x509 import CABundle, CertIdentity, CertificateError, parse_der

log = logging.getLogger(__name__)

Headers = Sequence[tuple[bytes, bytes]]
# Certificate verification results stay valid while the CA snapshot is unchanged; the TTL only bounds
# how long an expiring certificate could still pass.
_CERT_CACHE_TTL = 60.0


class TokenAuthenticator(Protocol):
    async def authenticate(self, token: str) -> UserInfo | None: ...


@dataclass(frozen=True)
class AuthnResult:
    user: UserInfo | None  # None -> 401
    error: str = ""
    # ASGI header names (lowercase bytes) the app must not see: front-proxy headers, used token.
    strip_headers: frozenset[bytes] = frozenset()


class Authenticator:
    def __init__(
        self,
        config: DynamicAuthnConfig | None = None,
        token_authenticators: Sequence[TokenAuthenticator] = (),
        *,
        anonymous: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.token_authenticators = list(token_authenticators)
        self.anonymous = anonymous
        self._cert_cache: TTLCache[tuple[CertIdentity | None, str]] = TTLCache(clock=clock)
        # Whole results for certificate-only requests, keyed by (config version, cert, all headers):
        # the aggregator sends byte-identical requests for each HPA, so a warm request is one lookup.
        self._result_cache: TTLCache[AuthnResult] = TTLCache(clock=clock)

    @property
    def configured(self) -> bool:
        """Whether any credential can be checked at all (else: local mode, anonymous only)."""
        cfg = self.config.current if self.config else AuthnConfig()
        return bool(self.token_authenticators or cfg.client_ca or cfg.request_header)

    # -- x509 ----------------------------------------------------------------------------------
    def _verify(self, der: bytes, bundle: CABundle, version: int, which: str) -> CertIdentity:
        key = (which, version, der)
        hit = self._cert_cache.get(key)
        if hit is None:
            try:
                hit = (bundle.verify(parse_der(der)), "")
            except CertificateError as exc:
                hit = (None, str(exc))
            self._cert_cache.set(key, hit, _CERT_CACHE_TTL)
        identity, error = hit
        if identity is None:
            raise CertificateError(error)
        return identity

    def _front_proxy(self, der: bytes, rh: RequestHeaderConfig, version: int, headers: Headers) -> UserInfo | None:
        identity = self._verify(der, rh.ca, version, "requestheader")
        if rh.allowed_names and identity.common_name not in rh.allowed_names:
            raise CertificateError(
                f"x509: subject with cn={identity.common_name} is not in the allowed list {list(rh.allowed_names)}"
            )
        values: dict[str, list[str]] = {}
        for raw_name, raw_value in headers:
            name = raw_name.decode("latin-1").lower()
            if rh.is_auth_header(name):
                values.setdefault(name, []).append(raw_value.decode("latin-1").strip())
        username = next((v[0] for h in rh.username_headers if (v := values.get(h)) and v[0]), "")
        if not username:
            return None  # verified proxy but no user header: no opinion (Kubernetes requestheader.go)
        groups = [g for h in rh.group_headers for g in values.get(h, ()) if g]
        uid = next((v[0] for h in rh.uid_headers if (v := values.get(h)) and v[0]), "")
        extra: dict[str, list[str]] = {}
        for name, vals in values.items():
            for prefix in rh.extra_prefixes:
                if name.startswith(prefix):
                    key = unquote(name[len(prefix) :].lower())
                    extra.setdefault(key, []).extend(vals)
                    break
        return UserInfo.make(username, groups, extra, uid, "front-proxy")

    # -- main entry ------------------------------------------------------------------------------
    async def authenticate(self, headers: Headers, tls: dict[str, Any] | None) -> AuthnResult:
        der = tls.get("client_cert_der") if tls else None
        if der:
            cfg = self.config.current if self.config else AuthnConfig()
            key = (cfg.version, der, tuple(headers))
            hit = self._result_cache.get(key)
            if hit is not None:
                return hit
            result = await self._authenticate(headers, der)
            if result.user is not None and b"authorization" not in result.strip_headers:
                self._result_cache.set(key, result, _CERT_CACHE_TTL)
            return result
        return await self._authenticate(headers, None)

    async def _authenticate(self, headers: Headers, der: bytes | None) -> AuthnResult:
        cfg = self.config.current if self.config else AuthnConfig()
        rh = cfg.request_header
        strip = _proxy_header_names(rh, headers) if rh else frozenset()
        errors: list[str] = []

        if der and rh is not None:
            try:
                user = self._front_proxy(der, rh, cfg.version, headers)
                if user is not None:
                    return AuthnResult(user.with_authenticated_group(), strip_headers=strip)
            except CertificateError as exc:
                errors.append(f"front-proxy: {exc}")
        if der and cfg.client_ca is not None:
            try:
                ident = self._verify(der, cfg.client_ca, cfg.version, "client")
                user = UserInfo.make(ident.common_name, list(ident.organizations), method="x509")
                return AuthnResult(user.with_authenticated_group(), strip_headers=strip)
            except CertificateError as exc:
                errors.append(f"client certificate: {exc}")

        token = _bearer_token(headers) if self.token_authenticators else None
        if token:
            for authenticator in self.token_authenticators:
                try:
                    user = await authenticator.authenticate(token)
                except TokenReviewError as exc:
                    errors.append(f"token review: {exc}")
                    continue
                if user is not None:
                    return AuthnResult(user.with_authenticated_group(), strip_headers=strip | {b"authorization"})
            errors.append("invalid bearer token")

        if errors:
            return AuthnResult(None, "; ".join(errors), strip)
        if self.anonymous:
            return AuthnResult(ANONYMOUS, strip_headers=strip)
        return AuthnResult(None, "no credentials", strip)


def _proxy_header_names(rh: RequestHeaderConfig, headers: Headers) -> frozenset[bytes]:
    names = set()
    for raw_name, _ in headers:
        if rh.is_auth_header(raw_name.decode("latin-1").lower()):
            names.add(raw_name.lower())
    return frozenset(names)


def _bearer_token(headers: Headers) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            parts = value.decode("latin-1").strip().split()
            if len(parts) == 2 and parts[0].lower() == "bearer" and parts[1]:
                return parts[1]
            return None
    return None
