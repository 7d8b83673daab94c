"""ASGI middleware: authenticate, authorize, then call the app with ``scope["user"]`` set.

Inner apps find::

    scope["user"] = {"name": str, "groups": [str], "extra": {str: [str]}, "uid": str, "method": str}
    scope["auth"] = {"attributes": RequestAttributes, "decision_reason": str}

Front-proxy headers (and a consumed bearer token) are removed from ``scope["headers"]`` before the
app runs, so nothing downstream can mistake a spoofed ``X-Remote-User`` for an identity.
Responses: 401 Status, 403 Status (docs/api.md §3), 500 text/plain for a failed SubjectAccessReview.
"""

from __future__ import annotations

import logging
from typing import Any

from adapter.auth.attributes import request_attributes
from adapter.auth.authn import Authenticator
from adapter.auth.authz import AuthorizationError, Authorizer
from adapter.auth.responses import (
    JSON_HEADERS,
    TEXT_HEADERS,
    UNAUTHORIZED_BODY,
    forbidden_body,
    internal_error_text,
    send_response,
)

log = logging.getLogger(__name__)


class AuthMiddleware:
    def __init__(self, app: Any, authenticator: Authenticator, authorizer: Authorizer) -> None:
        self.app = app
        self.authenticator = authenticator
        self.authorizer = authorizer

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            # lifespan passes through; websockets are not part of this API
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        tls = (scope.get("extensions") or {}).get("tls")
        result = await self.authenticator.authenticate(headers, tls)
        if result.user is None:
            log.info("unauthorized %s %s: %s", scope.get("method"), scope.get("path"), result.error)
            await send_response(send, 401, JSON_HEADERS, UNAUTHORIZED_BODY)
            return

        user = result.user
        attrs = request_attributes(scope.get("method", "GET"), scope.get("path", "/"), scope.get("query_string", b""))
        try:
            decision = await self.authorizer.authorize(user, attrs)
        except AuthorizationError as exc:
            log.warning("authorization of %s %s failed: %s", user.name, attrs.path, exc)
            await send_response(send, 500, TEXT_HEADERS, internal_error_text(_request_uri(scope), str(exc)))
            return
        if not decision.allowed:
            await send_response(send, 403, JSON_HEADERS, forbidden_body(user, attrs, decision.reason))
            return

        scope = dict(scope)
        if result.strip_headers:
            scope["headers"] = [(n, v) for n, v in headers if n.lower() not in result.strip_headers]
        scope["user"] = user.to_scope()
        scope["auth"] = {"attributes": attrs, "decision_reason": decision.reason}
        await self.app(scope, receive, send)


def _request_uri(scope: dict[str, Any]) -> str:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes | bytearray) else scope.get("path", "/")
    query = scope.get("query_string", b"")
    return f"{path}?{query.decode('latin-1')}" if query else path
