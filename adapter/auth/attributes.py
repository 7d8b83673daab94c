"""Authorization attributes of a request (Kubernetes RequestInfoFactory, docs/api.md §6.3).

``/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth`` (GET) becomes a *resource*
request: verb ``list`` (``watch`` with ``?watch=true``), group ``external.metrics.k8s.io``, version
``v1beta1``, namespace ``default``, resource ``queue_depth``.  Paths with fewer segments (``/apis``,
``/apis/<group>``, ``/apis/<group>/<version>``), ``/openapi/*``, ``/version`` and ``/metrics`` are
*non-resource* requests with verb = lowercase method and the path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from adapter import labels

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
    # len(method + path + query) the attributes were built from: caches key large ones by digest.
    size: int = field(default=0, compare=False, repr=False)

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
# Only short requests are memoized (an HPA's URL is ~100 bytes): a memo of 4096 arbitrary URLs of
# up to 64 KB, filled by anonymous requests, would pin 256 MB.
_MEMO_KEY_MAX_SIZE = 1024


def request_attributes(method: str, path: str, query_string: bytes | str = b"") -> RequestAttributes:
    """Memoized: the HPA repeats the same few URLs every 15 s, so a hit is one dict lookup."""
    key = (method, path, query_string)
    attrs = _MEMO.get(key)
    if attrs is None:
        attrs = _request_attributes(method, path, query_string)
        if attrs.size <= _MEMO_KEY_MAX_SIZE:
            if len(_MEMO) >= _MEMO_MAX:
                _MEMO.clear()  # crude but bounded; refilled by the next requests
            _MEMO[key] = attrs
    return attrs


def _split_path(path: str) -> list[str]:
    """splitPath: trim "/" at both ends, then split, keeping empty segments in between (so an
    empty namespace segment is an empty namespace, not a shift of the later segments)."""
    trimmed = path.strip("/")
    return trimmed.split("/") if trimmed else []


def _request_attributes(method: str, path: str, query_string: bytes | str) -> RequestAttributes:
    size = len(method) + len(path) + len(query_string)
    verb_for_method = _METHOD_VERBS.get(method.upper(), method.lower())
    parts = _split_path(path)
    non_resource = RequestAttributes(verb=method.lower(), path=path, resource_request=False, size=size)
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
        # runtime.Convert_Slice_string_To_bool: only "0" and "false" (any case) are false, so an
        # empty ``?watch=`` is a watch (the API answers it 405 as one, adapter.api.app._kube_bool).
        # A ``fieldSelector=metadata.name=x`` is deliberately *not* made the name, as RequestInfo
        # does: the API ignores field selectors, so authorizing a single name would serve them all.
        watch = query.get("watch")
        verb = "watch" if watch and watch[0] != "0" and watch[0].lower() != "false" else "list"
    requirements = None
    if verb in ("list", "watch"):
        requirements = _selector_requirements(query_string)
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
        size=size,
    )


# webhook.go labelSelectorToAuthorizationAPI: =, ==, in -> In; !=, notin -> NotIn; Gt/Lt dropped.
_SAR_OPERATORS = {
    labels.EQUALS: "In",
    labels.DOUBLE_EQUALS: "In",
    labels.IN: "In",
    labels.NOT_EQUALS: "NotIn",
    labels.NOT_IN: "NotIn",
    labels.EXISTS: "Exists",
    labels.DOES_NOT_EXIST: "DoesNotExist",
}


def _selector_requirements(query_string: bytes | str) -> tuple[tuple[str, str, tuple[str, ...]], ...] | None:
    """The ``labelSelector`` decoded exactly as the API decodes it (adapter.api.app: UTF-8, first
    value), so the review is about the selection that is served; None if there is none."""
    try:
        text = query_string.decode("utf-8") if isinstance(query_string, bytes) else query_string
        values = parse_qs(text, keep_blank_values=True, errors="strict").get("labelSelector")
    except ValueError:  # UnicodeDecodeError included: the API answers 400
        return None
    if not values or not values[0]:
        return None
    return parse_label_requirements(values[0])


_EMPTY_VALUE_LIST = re.compile(r"\(\s*\)")


def parse_label_requirements(selector: str) -> tuple[tuple[str, str, tuple[str, ...]], ...] | None:
    """Label selector -> SAR requirements, parsed by :func:`adapter.labels.parse_selector` (the
    parser the API filters with; a second parser here once disagreed with it, e.g. at a NUL byte).

    Returns None when the selector does not parse; the API handler then answers 400 itself, and the
    SAR is simply sent without a selector (which is what kube does with a selector it cannot parse).
    """
    if _EMPTY_VALUE_LIST.search(selector):
        # Go reads "k in ()" as k in (""); the SAR goes without a selector instead (what the earlier
        # parser here did): a broader review than the selection served, never a narrower one.
        return None
    try:
        selector_obj = labels.parse_selector(selector)
    except labels.SelectorError:
        return None
    out = [
        (r.key, _SAR_OPERATORS[r.operator], r.values) for r in selector_obj.requirements if r.operator in _SAR_OPERATORS
    ]
    # labels.Parse sorts requirements by key (stable); the SAR lists them in that order.
    return tuple(out)
