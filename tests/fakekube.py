"""An in-process fake of the Kubernetes API endpoints prescaler uses, over real HTTPS on 127.0.0.1.

Why a fake and not mocks: the store, the status writer and delegated auth all talk to the API through
the official `kubernetes` client (urllib3, TLS, chunked watch streams). Exercising the real client
against real JSON shapes catches mistakes that a mocked method never would.

Transport: `http.server.ThreadingHTTPServer` + `ssl`, one thread per connection (TLS handshake in the
connection thread, never in the accept loop). Normal responses carry a Content-Length (keep-alive
works); watch responses use chunked transfer encoding, one JSON event per line, as kube-apiserver does.
The server certificate is signed by a throw-away CA generated here with `cryptography`.

Quick start::

    from tests.fakekube import FakeKube       # or `from fakekube import FakeKube`
    with FakeKube() as fake:                  # starts on a random port
        api = fake.api_client()               # kubernetes.client.ApiClient with CA + bearer token
        path = fake.write_kubeconfig(tmp_path / "kubeconfig")  # for --kubeconfig / load_kube_config
        fake.apply({"apiVersion": "prescaler.pingpong.ai/v1", "kind": "VirtualMetric",
                    "metadata": {"name": "rps"}, "spec": {"defaultValue": 0}})

Resource types served (``FakeKube.TYPES``; more via ``register_type``):
  * ``prescaler.pingpong.ai/v1`` VirtualMetric (``virtualmetrics``) and VirtualMetricEvent
    (``virtualmetricevents``): cluster-scoped CRDs with a ``status`` subresource.
  * core ``v1`` ConfigMap (namespaced), ``coordination.k8s.io/v1`` Lease (namespaced).

HTTP verbs on those types (paths as kube-apiserver: ``/api/v1[/namespaces/NS]/PLURAL[/NAME[/status]]``,
``/apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME[/status]]``):
  * GET collection -> ``{Kind}List`` with ``metadata.resourceVersion``; ``fieldSelector``
    (``metadata.name=``, ``metadata.namespace=``) and equality ``labelSelector`` are honoured.
  * GET collection ``?watch=1&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=S`` ->
    chunked stream of ``{"type": "ADDED|MODIFIED|DELETED|BOOKMARK|ERROR", "object": {...}}`` lines.
    No/empty/"0" resourceVersion: synthetic ADDED for every current object first. N older than the
    last ``compact()``: an ERROR event with a 410 ``Status`` ("too old resource version") and the
    stream ends -- or, with ``fake.gone_on_start = "http"``, an HTTP 410 ``Status`` response.
  * GET/PUT/PATCH/DELETE one object, POST create. PUT and a patch carrying
    ``metadata.resourceVersion`` are optimistic: a mismatch is 409 Conflict.
  * ``.../NAME/status`` (status subresource): PUT or PATCH (``application/merge-patch+json``,
    strategic-merge treated as merge, ``application/json-patch+json``) change only ``status``; they bump
    ``resourceVersion`` but not ``generation``. Writes to the main resource ignore ``status`` and bump
    ``generation`` when anything outside metadata/status changed. A no-op write changes nothing and
    sends no event (as the real API server).
  * POST ``/apis/authentication.k8s.io/v1/tokenreviews``: ``fake.tokens[token] = {"username": ...,
    "groups": [...], "uid": ..., "extra": {...}}`` or ``fake.token_review_handler = fn(token) ->
    user dict | None``; unknown tokens get ``authenticated: false``. Bodies recorded in
    ``fake.token_reviews``.
  * POST ``/apis/authorization.k8s.io/v1/subjectaccessreviews``: ``fake.sar_policy = fn(spec) ->
    (allowed, reason)`` (default: allow). Bodies recorded in ``fake.subject_access_reviews``.
  * ``kube-system/extension-apiserver-authentication`` is an ordinary ConfigMap (GET, list with
    ``fieldSelector=metadata.name=...``, watch); set it with ``fake.set_auth_configmap(data)``.

Every request needs ``Authorization: Bearer <fake.token>`` (any of ``fake.accepted_tokens``), else
401 ``Status``; ``fake.require_auth = False`` turns that off. Every request is recorded in
``fake.requests`` as ``RecordedRequest(method, path, query, body, headers)``.

Test controls (all thread-safe):
  * ``apply(obj)``, ``delete(kind, name, namespace=None)``, ``get(kind, name, namespace=None)``,
    ``set_status(kind, name, status)``: Python-side writes that bump resourceVersion / generation /
    uid / creationTimestamp like the API server and notify watchers.
  * ``drop_watches(abrupt=False)``: end every open watch (cleanly, or by resetting the socket).
  * ``compact()``: forget history, so a watch from an older resourceVersion gets 410.
  * ``expire_watches()``: send an ERROR 410 event on every open watch and end it.
  * ``send_bookmark()``: a BOOKMARK at the current resourceVersion on watches that allow bookmarks.
  * ``inject_error(method, path_regex, code=500, times=1)``: the next matching requests fail;
    ``clear_errors()`` cancels what is left.
  * ``watch_count(plural=None)``, ``wait_for(predicate, timeout)`` helpers for tests.
"""

from __future__ import annotations

import copy
import datetime as dt
import ipaddress
import json
import queue
import re
import socket
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

JSON = dict[str, Any]


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    has_generation: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def builtin(self) -> bool:
        return not self.group.endswith("pingpong.ai")


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class _Watcher:
    rtype: ResourceType
    namespace: str | None
    field_name: str | None
    labels: dict[str, str]
    bookmarks: bool
    events: queue.Queue[JSON | str] = field(default_factory=queue.Queue)
    sock: socket.socket | None = None


@dataclass
class _InjectedError:
    method: str
    path: re.Pattern[str]
    code: int
    times: int
    message: str


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def status_object(code: int, reason: str, message: str) -> JSON:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(doc: JSON, ops: list[JSON]) -> JSON:
    """A small RFC 6902 subset (add, replace, remove, test) -- enough for status writes."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        kind = op["op"]
        if kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif kind == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"replace: missing path {op['path']}")
                parent[last] = op["value"]
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, "Invalid", f"test failed at {op['path']}")
        else:
            raise ApiError(422, "Invalid", f"unsupported json-patch op {kind!r}")
    return doc


def _generate_tls() -> tuple[bytes, bytes, bytes]:
    """(ca_pem, server_cert_pem, server_key_pem): a CA and a server cert for 127.0.0.1/localhost."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fakekube-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fakekube")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (
        ca_cert.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


_CLOSE = "close"  # watcher queue sentinels
_ABORT = "abort"


class FakeKube:
    GROUP = "prescaler.pingpong.ai"
    TYPES: tuple[ResourceType, ...] = (
        ResourceType(GROUP, "v1", "virtualmetrics", "VirtualMetric", False, status_subresource=True),
        ResourceType(GROUP, "v1", "virtualmetricevents", "VirtualMetricEvent", False, status_subresource=True),
        ResourceType("", "v1", "configmaps", "ConfigMap", True, has_generation=False),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, has_generation=False),
        ResourceType("", "v1", "events", "Event", True, has_generation=False),
    )

    def __init__(self, token: str = "fake-admin-token"):
        self.token = token
        self.accepted_tokens: set[str] = {token}
        self.require_auth = True
        self.gone_on_start = "event"  # or "http"
        self.requests: list[RecordedRequest] = []
        self.tokens: dict[str, JSON] = {}
        self.token_review_handler: Callable[[str], JSON | None] | None = None
        self.token_reviews: list[JSON] = []
        self.sar_policy: Callable[[JSON], tuple[bool, str]] = lambda spec: (True, "fake: allow all")
        self.subject_access_reviews: list[JSON] = []
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rtype in self.TYPES:
            self.register_type(rtype)
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str, str, str], JSON] = {}  # (group, plural, ns, name)
        self._history: list[tuple[int, ResourceType, str, str, JSON]] = []  # rv, type, ns, event, obj
        self._rv = 1
        self._compacted_rv = 0
        self._watchers: list[_Watcher] = []
        self._errors: list[_InjectedError] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tmpdir = tempfile.TemporaryDirectory(prefix="fakekube-")
        self.ca_pem, cert_pem, key_pem = _generate_tls()
        tmp = Path(self._tmpdir.name)
        self.ca_file = str(tmp / "ca.crt")
        Path(self.ca_file).write_bytes(self.ca_pem)
        (tmp / "tls.crt").write_bytes(cert_pem)
        (tmp / "tls.key").write_bytes(key_pem)
        self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ssl.load_cert_chain(str(tmp / "tls.crt"), str(tmp / "tls.key"))
        self.port = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        fake: FakeKube = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # TLS handshakes aborted by tests and reset sockets are expected here

        class Handler(_Handler):
            server_fake = fake

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fakekube", kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.drop_watches(abrupt=True)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._tmpdir.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def register_type(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def write_kubeconfig(self, path: str | Path, token: str | None = None) -> Path:
        """A kubeconfig (CA embedded as a file path, bearer token) for `load_kube_config`."""
        import yaml

        path = Path(path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, "certificate-authority": self.ca_file}}],
            "users": [{"name": "fake", "user": {"token": token or self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def api_client(self, token: str | None = None) -> Any:
        """A `kubernetes.client.ApiClient` talking to this fake (verifying its CA)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.ssl_ca_cert = self.ca_file
        cfg.verify_ssl = True
        cfg.api_key = {"authorization": f"Bearer {token or self.token}"}
        return client.ApiClient(cfg)

    # ------------------------------------------------------------------ Python-side object access

    def _type_for_kind(self, kind: str, api_version: str | None = None) -> ResourceType:
        for rtype in self._types.values():
            if rtype.kind == kind and (api_version is None or rtype.api_version == api_version):
                return rtype
        raise KeyError(f"fakekube: unknown kind {kind!r}")

    def apply(self, obj: JSON) -> JSON:
        """Create or replace (like `kubectl apply`); returns the stored object."""
        rtype = self._type_for_kind(obj["kind"], obj.get("apiVersion"))
        ns = (obj.get("metadata") or {}).get("namespace") or ""
        name = obj["metadata"]["name"]
        body = copy.deepcopy(obj)
        body["metadata"].pop("resourceVersion", None)
        with self._lock:
            if (rtype.group, rtype.plural, ns, name) in self._objects:
                return self._update(rtype, ns, name, body, subresource=None)
            return self._create(rtype, ns, body)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        with self._lock:
            self._delete(self._type_for_kind(kind), namespace or "", name)

    def get(self, kind: str, name: str, namespace: str | None = None) -> JSON | None:
        rtype = self._type_for_kind(kind)
        with self._lock:
            obj = self._objects.get((rtype.group, rtype.plural, namespace or "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, kind: str) -> list[JSON]:
        rtype = self._type_for_kind(kind)
        with self._lock:
            return [
                copy.deepcopy(o)
                for (g, p, _, _), o in sorted(self._objects.items())
                if (g, p) == (rtype.group, rtype.plural)
            ]

    def set_status(self, kind: str, name: str, status: JSON, namespace: str | None = None) -> JSON:
        rtype = self._type_for_kind(kind)
        with self._lock:
            return self._update(rtype, namespace or "", name, {"status": status}, subresource="status")

    def set_auth_configmap(self, data: dict[str, str]) -> JSON:
        return self.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
                "data": dict(data),
            }
        )

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    # ------------------------------------------------------------------ test controls

    def drop_watches(self, abrupt: bool = False) -> int:
        """End every open watch; `abrupt` resets the TCP connection instead of ending the stream."""
        with self._lock:
            watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            if abrupt and watcher.sock is not None:
                try:
                    watcher.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            watcher.events.put(_ABORT if abrupt else _CLOSE)
        return len(watchers)

    def compact(self) -> None:
        with self._lock:
            self._compacted_rv = self._rv
            self._history.clear()

    def expire_watches(self) -> int:
        with self._lock:
            watchers, self._watchers = self._watchers, []
            message = f"too old resource version: 1 ({self._rv})"
        for watcher in watchers:
            watcher.events.put({"type": "ERROR", "object": status_object(410, "Expired", message)})
            watcher.events.put(_CLOSE)
        return len(watchers)

    def send_bookmark(self) -> int:
        sent = 0
        with self._lock:
            for watcher in self._watchers:
                if watcher.bookmarks:
                    watcher.events.put(self._bookmark(watcher.rtype))
                    sent += 1
        return sent

    def inject_error(
        self, method: str, path_regex: str, code: int = 500, times: int = 1, message: str = "injected error"
    ) -> None:
        with self._lock:
            self._errors.append(_InjectedError(method.upper(), re.compile(path_regex), code, times, message))

    def clear_errors(self) -> None:
        with self._lock:
            self._errors.clear()

    def watch_count(self, plural: str | None = None) -> int:
        with self._lock:
            return sum(1 for w in self._watchers if plural is None or w.rtype.plural == plural)

    def requests_matching(self, method: str | None = None, path_regex: str = "") -> list[RecordedRequest]:
        pattern = re.compile(path_regex)
        with self._lock:
            return [
                r for r in self.requests if (method is None or r.method == method.upper()) and pattern.search(r.path)
            ]

    @staticmethod
    def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
            time.sleep(interval)

    # ------------------------------------------------------------------ storage (call with lock held)

    def _bookmark(self, rtype: ResourceType) -> JSON:
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": rtype.kind,
                "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": str(self._rv)},
            },
        }

    def _emit(self, rtype: ResourceType, ns: str, event_type: str, obj: JSON) -> None:
        snapshot = copy.deepcopy(obj)
        self._history.append((self._rv, rtype, ns, event_type, snapshot))
        for watcher in self._watchers:
            if self._matches(watcher, rtype, ns, snapshot):
                watcher.events.put({"type": event_type, "object": snapshot})

    @staticmethod
    def _matches(watcher: _Watcher, rtype: ResourceType, ns: str, obj: JSON) -> bool:
        if watcher.rtype != rtype or (watcher.namespace is not None and watcher.namespace != ns):
            return False
        meta = obj.get("metadata", {})
        if watcher.field_name is not None and meta.get("name") != watcher.field_name:
            return False
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in watcher.labels.items())

    def _stamp(self, rtype: ResourceType, obj: JSON) -> None:
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _create(self, rtype: ResourceType, ns: str, body: JSON) -> JSON:
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        key = (rtype.group, rtype.plural, ns, name)
        if key in self._objects:
            raise ApiError(409, "AlreadyExists", f'{rtype.plural} "{name}" already exists')
        obj = copy.deepcopy(body)
        if rtype.status_subresource:
            obj.pop("status", None)  # status is set through the subresource only
        meta = obj["metadata"]
        if rtype.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if rtype.has_generation:
            meta["generation"] = 1
        self._rv += 1
        self._stamp(rtype, obj)
        self._objects[key] = obj
        self._emit(rtype, ns, "ADDED", obj)
        return copy.deepcopy(obj)

    def _update(self, rtype: ResourceType, ns: str, name: str, body: JSON, subresource: str | None) -> JSON:
        key = (rtype.group, rtype.plural, ns, name)
        old = self._objects.get(key)
        if old is None:
            raise ApiError(404, "NotFound", f'{rtype.plural} "{name}" not found')
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_rv not in (None, "") and str(wanted_rv) != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rtype.plural} "{name}": '
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in body and body["status"] is not None:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(body)
            new_meta = new.setdefault("metadata", {})
            for keep in ("uid", "creationTimestamp", "generation", "namespace", "name"):
                if keep in old["metadata"]:
                    new_meta[keep] = old["metadata"][keep]
                else:
                    new_meta.pop(keep, None)
            if rtype.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
        if new == old:
            return copy.deepcopy(old)  # no-op write: no new resourceVersion, no event
        if subresource is None and rtype.has_generation and _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        self._rv += 1
        self._stamp(rtype, new)
        self._objects[key] = new
        self._emit(rtype, ns, "MODIFIED", new)
        return copy.deepcopy(new)

    def _delete(self, rtype: ResourceType, ns: str, name: str) -> JSON:
        key = (rtype.group, rtype.plural, ns, name)
        old = self._objects.pop(key, None)
        if old is None:
            raise ApiError(404, "NotFound", f'{rtype.plural} "{name}" not found')
        self._rv += 1
        self._stamp(rtype, old)
        self._emit(rtype, ns, "DELETED", old)
        return copy.deepcopy(old)

    def _list(self, rtype: ResourceType, ns: str | None, field_name: str | None, labels: dict[str, str]) -> JSON:
        probe = _Watcher(rtype, ns, field_name, labels, False)
        items = []
        for (group, plural, obj_ns, _), obj in sorted(self._objects.items()):
            if (group, plural) == (rtype.group, rtype.plural) and self._matches(probe, rtype, obj_ns, obj):
                item = copy.deepcopy(obj)
                if rtype.builtin:  # the real API server omits kind/apiVersion on built-in list items
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                items.append(item)
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    # ------------------------------------------------------------------ request handling

    def _check_injected(self, method: str, path: str) -> None:
        with self._lock:
            for err in self._errors:
                if err.times > 0 and err.method in (method, "*") and err.path.search(path):
                    err.times -= 1
                    reason = {
                        409: "Conflict",
                        404: "NotFound",
                        403: "Forbidden",
                        429: "TooManyRequests",
                        503: "ServiceUnavailable",
                    }.get(err.code, "InternalError")
                    raise ApiError(err.code, reason, err.message)

    def _route(self, method: str, path: str) -> tuple[ResourceType, str | None, str | None, str | None]:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rtype = self._types.get((group, version, rest[0]))
        if rtype is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if ns is not None and not rtype.namespaced:
            raise ApiError(404, "NotFound", f"{rtype.plural} is cluster-scoped")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and (sub != "status" or not rtype.status_subresource):
            raise ApiError(404, "NotFound", f"no subresource {sub!r}")
        if name is not None and rtype.namespaced and ns is None:
            raise ApiError(404, "NotFound", "namespace required")
        return rtype, ns, name, sub

    def handle(self, handler: _Handler, method: str) -> None:
        split = urlsplit(handler.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(
                RecordedRequest(method, path, query, body, {k.lower(): v for k, v in handler.headers.items()})
            )
        try:
            if self.require_auth:
                auth = handler.headers.get("Authorization", "")
                if not auth.startswith("Bearer ") or auth[len("Bearer ") :] not in self.accepted_tokens:
                    raise ApiError(401, "Unauthorized", "Unauthorized")
            self._check_injected(method, path)
            if isinstance(body, str):
                raise ApiError(400, "BadRequest", "request body is not JSON")
            if method == "POST" and path == "/apis/authentication.k8s.io/v1/tokenreviews":
                return handler.send_json(201, self._token_review(body or {}))
            if method == "POST" and path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
                return handler.send_json(201, self._subject_access_review(body or {}))
            rtype, ns, name, sub = self._route(method, path)
            if method == "GET" and name is None and query.get("watch") in ("1", "true"):
                return self._serve_watch(handler, rtype, ns, query)
            handler.send_json(
                *self._serve_rest(method, rtype, ns, name, sub, query, body, handler.headers.get("Content-Type", ""))
            )
        except ApiError as err:
            handler.send_json(err.code, status_object(err.code, err.reason, err.message))

    def _serve_rest(
        self,
        method: str,
        rtype: ResourceType,
        ns: str | None,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
        body: Any,
        content_type: str,
    ) -> tuple[int, JSON]:
        with self._lock:
            if name is None:
                if method == "GET":
                    field_name, field_ns = _field_selector(query.get("fieldSelector", ""))
                    return 200, self._list(
                        rtype,
                        ns if ns is not None else field_ns,
                        field_name,
                        _label_selector(query.get("labelSelector", "")),
                    )
                if method == "POST":
                    if not isinstance(body, dict):
                        raise ApiError(400, "BadRequest", "body must be an object")
                    return 201, self._create(rtype, ns or "", body)
                raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on a collection")
            key_ns = ns or ""
            current = self._objects.get((rtype.group, rtype.plural, key_ns, name))
            if method == "GET":
                if current is None:
                    raise ApiError(404, "NotFound", f'{rtype.plural} "{name}" not found')
                return 200, copy.deepcopy(current)
            if method == "DELETE":
                return 200, self._delete(rtype, key_ns, name)
            if not isinstance(body, (dict, list)):
                raise ApiError(400, "BadRequest", "body must be JSON")
            if method == "PUT":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "body must be an object")
                return 200, self._update(rtype, key_ns, name, body, sub)
            if method == "PATCH":
                if current is None:
                    raise ApiError(404, "NotFound", f'{rtype.plural} "{name}" not found')
                if "json-patch" in content_type:
                    if not isinstance(body, list):
                        raise ApiError(400, "BadRequest", "json-patch body must be a list")
                    patched = json_patch(current, body)
                    patched["metadata"].pop("resourceVersion", None)
                elif "merge-patch" in content_type or "strategic-merge-patch" in content_type:
                    if not isinstance(body, dict):
                        raise ApiError(400, "BadRequest", "merge patch body must be an object")
                    patched = merge_patch(
                        {k: v for k, v in current.items()}, {**body, "metadata": {**(body.get("metadata") or {})}}
                    )
                    if "resourceVersion" not in (body.get("metadata") or {}):
                        patched["metadata"].pop("resourceVersion", None)
                else:
                    raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
                return 200, self._update(rtype, key_ns, name, patched, sub)
            raise ApiError(405, "MethodNotAllowed", f"{method} not allowed")

    def _serve_watch(self, handler: _Handler, rtype: ResourceType, ns: str | None, query: dict[str, str]) -> None:
        field_name, field_ns = _field_selector(query.get("fieldSelector", ""))
        watcher = _Watcher(
            rtype,
            ns if ns is not None else field_ns,
            field_name,
            _label_selector(query.get("labelSelector", "")),
            query.get("allowWatchBookmarks") in ("1", "true"),
            sock=handler.connection,
        )
        rv_text = query.get("resourceVersion", "")
        with self._lock:
            if rv_text in ("", "0"):
                for (group, plural, obj_ns, _), obj in sorted(self._objects.items()):
                    if (group, plural) == (rtype.group, rtype.plural) and self._matches(watcher, rtype, obj_ns, obj):
                        watcher.events.put({"type": "ADDED", "object": copy.deepcopy(obj)})
            else:
                try:
                    since = int(rv_text)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resourceVersion {rv_text!r}") from None
                if since < self._compacted_rv:
                    message = f"too old resource version: {since} ({self._compacted_rv})"
                    if self.gone_on_start == "http":
                        raise ApiError(410, "Expired", message)
                    watcher.events.put({"type": "ERROR", "object": status_object(410, "Expired", message)})
                    watcher.events.put(_CLOSE)
                else:
                    for rv, etype, obj_ns, event, obj in self._history:
                        if rv > since and self._matches(watcher, etype, obj_ns, obj):
                            watcher.events.put({"type": event, "object": obj})
            self._watchers.append(watcher)
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        deadline = time.monotonic() + timeout if timeout else None
        try:
            handler.start_chunked(200)
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    item = watcher.events.get(timeout=min(0.2, remaining) if remaining else 0.2)
                except queue.Empty:
                    if self._server is None:
                        break
                    continue
                if item == _ABORT:
                    handler.close_connection = True
                    return
                if item == _CLOSE:
                    break
                handler.write_chunk(json.dumps(item).encode() + b"\n")
            handler.end_chunked()
        except OSError:
            handler.close_connection = True
        finally:
            with self._lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)

    def _token_review(self, body: JSON) -> JSON:
        with self._lock:
            self.token_reviews.append(copy.deepcopy(body))
        token = ((body.get("spec") or {}).get("token")) or ""
        user = self.token_review_handler(token) if self.token_review_handler else self.tokens.get(token)
        status: JSON = {"authenticated": False} if user is None else {"authenticated": True, "user": user}
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {"creationTimestamp": None},
            "spec": body.get("spec") or {},
            "status": status,
        }

    def _subject_access_review(self, body: JSON) -> JSON:
        with self._lock:
            self.subject_access_reviews.append(copy.deepcopy(body))
        spec = body.get("spec") or {}
        allowed, reason = self.sar_policy(spec)
        status: JSON = {"allowed": bool(allowed), "reason": reason}
        if not allowed:
            status["denied"] = True
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }


def _spec_part(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _field_selector(text: str) -> tuple[str | None, str | None]:
    name = namespace = None
    for term in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = term.replace("==", "=").partition("=")
        if key == "metadata.name":
            name = value
        elif key == "metadata.namespace":
            namespace = value
        else:
            raise ApiError(400, "BadRequest", f'field label not supported: "{key}"')
    return name, namespace


def _label_selector(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "=" not in term or "!=" in term:
            raise ApiError(400, "BadRequest", f"fakekube supports only equality label selectors, got {term!r}")
        key, _, value = term.replace("==", "=").partition("=")
        labels[key.strip()] = value.strip()
    return labels


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeKube

    def setup(self) -> None:
        # TLS handshake here, in the connection's own thread, so a slow client never blocks accept().
        self.request = self.server_fake._ssl.wrap_socket(self.request, server_side=True)
        self.connection = self.request
        super().setup()

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ssl.SSLError, ConnectionError, OSError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read `fake.requests`
        pass

    def do_GET(self) -> None:
        self.server_fake.handle(self, "GET")

    def do_POST(self) -> None:
        self.server_fake.handle(self, "POST")

    def do_PUT(self) -> None:
        self.server_fake.handle(self, "PUT")

    def do_PATCH(self) -> None:
        self.server_fake.handle(self, "PATCH")

    def do_DELETE(self) -> None:
        self.server_fake.handle(self, "DELETE")

    def send_json(self, code: int, body: JSON) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
