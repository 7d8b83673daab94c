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

import hashlib
import logging
import re
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
    # ASGI header names (lowercase bytes) the app must not see: front-proxy headers, Authorization.
    strip_headers: frozenset[bytes] = frozenset()
    # Authenticated by a bearer token: the token authenticators cache that (with their own TTL).
    via_token: bool = False


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
        # Both caches are keyed by SHA-256 digests, never by the certificate or header bytes: any
        # client can present any certificate (the handshake accepts them all), and 4096 keys holding
        # ~100 KB certificates (or 64 KB heads) each would pin hundreds of MB.
        self._cert_cache: TTLCache[tuple[CertIdentity | None, str]] = TTLCache(clock=clock)
        # Whole results for certificate requests, keyed by (config version, digest of the cert and
        # of the headers authentication reads): the aggregator sends the same identity headers for
        # each HPA, so a warm request is one digest and one lookup.
        self._result_cache: TTLCache[AuthnResult] = TTLCache(clock=clock)

    @property
    def configured(self) -> bool:
        """Whether any credential can be checked at all (else: local mode, anonymous only)."""
        cfg = self.config.current if self.config else AuthnConfig()
        return bool(self.token_authenticators or cfg.client_ca or cfg.request_header)

    # -- x509 ----------------------------------------------------------------------------------
    def _verify(self, der: bytes, bundle: CABundle, version: int, which: str) -> CertIdentity:
        key = (which, version, hashlib.sha256(der).digest())
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
                values.setdefault(name, []).append(_header_value(raw_value))
        username = next((v[0] for h in rh.username_headers if (v := values.get(h)) and v[0]), "")
        if not username:
            return None  # verified proxy but no user header: no opinion (Kubernetes requestheader.go)
        groups = [g for h in rh.group_headers for g in values.get(h, ()) if g]
        uid = next((v[0] for h in rh.uid_headers if (v := values.get(h)) and v[0]), "")
        extra: dict[str, list[str]] = {}
        for name, vals in values.items():
            for prefix in rh.extra_prefixes:
                if name.startswith(prefix):
                    key = _path_unescape(name[len(prefix) :].lower())
                    extra.setdefault(key, []).extend(vals)
                    break
        return UserInfo.make(username, groups, extra, uid, "front-proxy")

    # -- main entry ------------------------------------------------------------------------------
    async def authenticate(self, headers: Headers, tls: dict[str, Any] | None) -> AuthnResult:
        der = tls.get("client_cert_der") if tls else None
        if der:
            cfg = self.config.current if self.config else AuthnConfig()
            key = (cfg.version, _result_digest(der, headers, cfg.request_header))
            hit = self._result_cache.get(key)
            if hit is not None:
                return hit
            result = await self._authenticate(headers, der)
            if result.user is not None and not result.via_token:
                self._result_cache.set(key, result, _CERT_CACHE_TTL)
            return result
        return await self._authenticate(headers, None)

    async def _authenticate(self, headers: Headers, der: bytes | None) -> AuthnResult:
        cfg = self.config.current if self.config else AuthnConfig()
        rh = cfg.request_header
        strip = _proxy_header_names(rh, headers) if rh else frozenset()
        # WithAuthentication deletes Authorization after *any* successful authentication (not only a
        # token's), "so that no one is ever tempted to use it inside of the API server".
        if any(name.lower() == b"authorization" for name, _ in headers):
            strip = strip | {b"authorization"}
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
                # CommonNameUserConversion: no CN is "no opinion" (on to tokens / anonymous), never
                # user "" with the O groups (O=system:masters would have skipped authorization).
                if ident.common_name:
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
                    return AuthnResult(user.with_authenticated_group(), strip_headers=strip, via_token=True)
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


# Go's unicode.IsSpace, for strings.TrimSpace (Python's str.strip() also strips \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _header_value(raw: bytes) -> str:
    """A header value as Go's net/http hands it over: the bytes as a (UTF-8) string, with only the
    optional whitespace around it removed. Latin-1 decoding turned "jöe" into "jÃ¶e", and
    str.strip() would turn user "alice\u3000" into "alice", someone else."""
    return raw.decode("utf-8", "replace").strip(" \t")


def _path_unescape(key: str) -> str:
    """url.PathUnescape as newExtra uses it: a malformed escape anywhere keeps the key as it is."""
    if "%" not in key or _BAD_ESCAPE.search(key):
        return key
    return unquote(key, errors="replace")


def _result_digest(der: bytes, headers: Headers, rh: RequestHeaderConfig | None) -> bytes:
    """Digest of what authentication reads: the certificate, the front-proxy headers and
    Authorization (length-prefixed, so no two header lists share a digest by concatenation)."""
    digest = hashlib.sha256(der)
    for raw_name, raw_value in headers:
        name = raw_name.lower()
        if name == b"authorization" or (rh is not None and rh.is_auth_header(name.decode("latin-1"))):
            digest.update(b"%d:%s%d:%s" % (len(name), name, len(raw_value), raw_value))
    return digest.digest()


def _bearer_token(headers: Headers) -> str | None:
    """bearertoken.Authenticator: TrimSpace, SplitN(" ", 3), scheme "bearer" in any case, parts[1].

    So ``Bearer tok extra`` is token ``tok``; ``Bearer  tok`` (two spaces: empty parts[1]) and
    ``Bearer<TAB>tok`` carry no token at all, and the request goes on as if it had none.
    """
    for name, value in headers:
        if name.lower() == b"authorization":
            parts = value.decode("utf-8", "replace").strip(_GO_SPACE).split(" ", 2)
            if len(parts) >= 2 and parts[0].lower() == "bearer" and parts[1]:
                return parts[1]
            return None
    return None
