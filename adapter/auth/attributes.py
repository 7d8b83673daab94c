"""Authorization attributes of a request (Kubernetes RequestInfoFactory, docs/api.md §6.3).

``/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth`` (GET) becomes a *resource*
request: verb ``list`` (``watch`` with ``?watch=true``), group ``external.metrics.k8s.io``, version
``v1beta1``, namespace ``default``, resource ``queue_depth``.  Paths with fewer segments (``/apis``,
``/apis/<group>``, ``/apis/<group>/<version>``), ``/openapi/*``, ``/version`` and ``/metrics`` are
*non-resource* requests with verb = lowercase method and the path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

_API_PREFIXES = {"api", "apis"}
_GROUPLESS_PREFIXES = {"api"}
_SPECIAL_VERBS = {"proxy", "watch"}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
_METHOD_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class RequestAttributes:
    verb: str
    path: str
    resource_request: bool
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    # Parsed label selector requirements for the SAR (None: no selector or unparsable).
    label_requirements: tuple[tuple[str, str, tuple[str, ...]], ...] | None = None

    def sar_attributes(self) -> dict[str, Any]:
        """The ``resourceAttributes`` / ``nonResourceAttributes`` part of a SubjectAccessReview spec."""
        if not self.resource_request:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        attrs: dict[str, Any] = {
            "namespace": self.namespace,
            "verb": self.verb,
            "group": self.group,
            "version": self.version,
            "resource": self.resource,
        }
        if self.subresource:
            attrs["subresource"] = self.subresource
        if self.name:
            attrs["name"] = self.name
        if self.label_requirements:
            attrs["labelSelector"] = {
                "requirements": [
                    {"key": k, "operator": op, **({"values": list(v)} if v else {})}
                    for k, op, v in self.label_requirements
                ]
            }
        return {"resourceAttributes": attrs}


_MEMO: dict[tuple[str, str, bytes | str], RequestAttributes] = {}
_MEMO_MAX = 4096


def request_attributes(method: str, path: str, query_string: bytes | str = b"") -> RequestAttributes:
    """Memoized: the HPA repeats the same few URLs every 15 s, so a hit is one dict lookup."""
    key = (method, path, query_string)
    attrs = _MEMO.get(key)
    if attrs is None:
        attrs = _request_attributes(method, path, query_string)
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()  # crude but bounded; refilled by the next requests
        _MEMO[key] = attrs
    return attrs


def _request_attributes(method: str, path: str, query_string: bytes | str) -> RequestAttributes:
    verb_for_method = _METHOD_VERBS.get(method.upper(), method.lower())
    parts = [p for p in path.strip("/").split("/") if p] if path.strip("/") else []
    non_resource = RequestAttributes(verb=method.lower(), path=path, resource_request=False)
    if len(parts) < 3 or parts[0] not in _API_PREFIXES:
        return non_resource
    prefix, rest = parts[0], parts[1:]
    group = ""
    if prefix not in _GROUPLESS_PREFIXES:
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    verb = verb_for_method
    if rest and rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            return non_resource
        verb, rest = rest[0], rest[1:]
    namespace = ""
    if len(rest) > 1 and rest[0] == "namespaces":
        namespace = rest[1]
        # a further segment that is not a namespace subresource is a namespaced resource
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if len(rest) >= 1 else ""
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 and verb != "proxy" else ""
    query = parse_qs(
        query_string.decode("latin-1") if isinstance(query_string, bytes) else query_string, keep_blank_values=True
    )
    if not name and verb == "get":
        watch = (query.get("watch") or [""])[0].lower()
        verb = "watch" if watch not in ("", "false", "0") else "list"
    requirements = None
    selector = (query.get("labelSelector") or [""])[0]
    if selector and verb in ("list", "watch"):
        requirements = parse_label_requirements(selector)
    return RequestAttributes(
        verb=verb,
        path=path,
        resource_request=True,
        group=group,
        version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
        label_requirements=requirements,
    )


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([^\s=!<>(),]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(<|>)\s*(-?\d+)\s*$")


def _split_top_level(selector: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_label_requirements(selector: str) -> tuple[tuple[str, str, tuple[str, ...]], ...] | None:
    """Label selector -> SAR requirements (webhook.go: In/NotIn/Exists/DoesNotExist; Gt/Lt dropped).

    Returns None when the selector does not parse; the API handler then answers 400 itself, and the
    SAR is simply sent without a selector (which is what a server without the feature does).
    """
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for raw in _split_top_level(selector):
        if not raw.strip():
            return None
        if m := _SET_RE.match(raw):
            values = tuple(sorted(v.strip() for v in m.group(4).split(",")))
            if all(not v for v in values):
                return None
            out.append((m.group(1), "In" if m.group(3) == "in" else "NotIn", values))
        elif m := _EQ_RE.match(raw):
            out.append((m.group(1), "NotIn" if m.group(3) == "!=" else "In", (m.group(4),)))
        elif m := _CMP_RE.match(raw):
            continue
        elif m := _EXISTS_RE.match(raw):
            out.append((m.group(2), "DoesNotExist" if m.group(1) else "Exists", ()))
        else:
            return None
    # labels.Parse sorts requirements by key; the SAR lists them in that order.
    return tuple(sorted(out, key=lambda r: r[0]))
