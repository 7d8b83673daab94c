"""Error responses exactly as the generic apiserver writes them (docs/api.md §3)."""

from __future__ import annotations

import json
from typing import Any

from adapter.auth.attributes import RequestAttributes
from adapter.auth.user import UserInfo
from adapter.labels import go_quote

JSON_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-cache, private")]
TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8"), (b"x-content-type-options", b"nosniff")]


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


UNAUTHORIZED_BODY = _dump(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
)


# Go's %q is adapter.labels.go_quote. (The JSON escaping used here before differed for control
# characters: "\u001b" for Go's "\x1b", DEL, U+2028 and other non-printables left raw.)
# responsewriters.InternalError passes its whole text through this replacer.
_SANITIZE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def forbidden_message(user: UserInfo, attrs: RequestAttributes, reason: str) -> str:
    """responsewriters.forbiddenMessage + apierrors.NewForbidden wording."""
    suffix = f": {reason}" if reason else ""
    name = go_quote(user.name)
    if not attrs.resource_request:
        return f"forbidden: User {name} cannot {attrs.verb} path {go_quote(attrs.path)}{suffix}"
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    if attrs.namespace:
        detail = (
            f"User {name} cannot {attrs.verb} resource {go_quote(resource)} in API group "
            f"{go_quote(attrs.group)} in the namespace {go_quote(attrs.namespace)}"
        )
    else:
        detail = (
            f"User {name} cannot {attrs.verb} resource {go_quote(resource)} in API group "
            f"{go_quote(attrs.group)} at the cluster scope"
        )
    qualified = attrs.resource + (f".{attrs.group}" if attrs.group else "")
    if not qualified:  # NewForbidden with an empty GroupResource
        return f"forbidden: {detail}{suffix}"
    if attrs.name:
        return f"{qualified} {go_quote(attrs.name)} is forbidden: {detail}{suffix}"
    return f"{qualified} is forbidden: {detail}{suffix}"


def forbidden_body(user: UserInfo, attrs: RequestAttributes, reason: str) -> bytes:
    details: dict[str, str] = {}
    if attrs.resource_request:
        if attrs.name:
            details["name"] = attrs.name
        if attrs.group:
            details["group"] = attrs.group
        if attrs.resource:
            details["kind"] = attrs.resource
    return _dump(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": forbidden_message(user, attrs, reason),
            "reason": "Forbidden",
            "details": details,
            "code": 403,
        }
    )


def internal_error_text(request_uri: str, error: str) -> bytes:
    """responsewriters.InternalError: ``Internal Server Error: "<URI>": <err>`` (http.Error adds \\n),
    with ``&``, ``<`` and ``>`` HTML-escaped in the whole text as kube's sanitizer does."""
    text = f"Internal Server Error: {go_quote(request_uri)}: {error}".translate(_SANITIZE)
    return f"{text}\n".encode()


async def send_response(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
