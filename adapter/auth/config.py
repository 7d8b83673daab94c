"""Authentication configuration: client CA and front-proxy (requestheader) settings, kept current.

Sources, as in Kubernetes' DelegatingAuthenticationOptions (docs/api.md §6.1):
- ``--client-ca-file`` if given, else key ``client-ca-file`` of ConfigMap
  ``kube-system/extension-apiserver-authentication``;
- ``--requestheader-client-ca-file`` (+ the other ``--requestheader-*`` flags) if given, else the
  ``requestheader-*`` keys of that ConfigMap (JSON arrays).
Files are re-read when they change; the ConfigMap is watched, so CA rotation needs no restart.
Readers take ``provider.current`` (an immutable snapshot swapped atomically), so requests never
see a half-updated configuration.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from adapter.auth.kubeapi import KubeAPIError, KubeAuthAPI
from adapter.auth.x509 import CABundle

log = logging.getLogger(__name__)

AUTH_CONFIGMAP_NAMESPACE = "kube-system"
AUTH_CONFIGMAP_NAME = "extension-apiserver-authentication"
DEFAULT_USERNAME_HEADERS = ("x-remote-user",)
DEFAULT_GROUP_HEADERS = ("x-remote-group",)
DEFAULT_EXTRA_PREFIXES = ("x-remote-extra-",)


@dataclass(frozen=True)
class RequestHeaderConfig:
    ca: CABundle
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = DEFAULT_USERNAME_HEADERS  # all lowercase (ASGI header names)
    group_headers: tuple[str, ...] = DEFAULT_GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = DEFAULT_EXTRA_PREFIXES
    uid_headers: tuple[str, ...] = ()

    def is_auth_header(self, name: str) -> bool:
        """Headers only the front proxy may set (stripped before the app sees the request)."""
        return (
            name in self.username_headers
            or name in self.group_headers
            or name in self.uid_headers
            or any(name.startswith(p) for p in self.extra_prefixes)
        )


@dataclass(frozen=True)
class AuthnConfig:
    client_ca: CABundle | None = None
    request_header: RequestHeaderConfig | None = None
    version: int = 0

    def client_ca_pems(self) -> bytes | None:
        pems = [b.pem.strip() + b"\n" for b in (self.client_ca, self.request_header and self.request_header.ca) if b]
        return b"".join(pems) if pems else None


def _norm_headers(values: list[str] | tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    cleaned = tuple(v.strip().lower() for v in values if v and v.strip())
    return cleaned or default


def _json_list(data: dict[str, str], key: str) -> list[str]:
    raw = data.get(key, "")
    if not raw.strip():
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"ConfigMap key {key!r} is not a JSON array: {exc}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"ConfigMap key {key!r} must be a JSON array of strings")
    return value


@dataclass
class AuthFlags:
    """The authentication flags (same names as Kubernetes); None/empty means "not given"."""

    client_ca_file: str | None = None
    requestheader_client_ca_file: str | None = None
    requestheader_allowed_names: list[str] = field(default_factory=list)
    requestheader_username_headers: list[str] = field(default_factory=list)
    requestheader_group_headers: list[str] = field(default_factory=list)
    requestheader_extra_headers_prefix: list[str] = field(default_factory=list)
    requestheader_uid_headers: list[str] = field(default_factory=list)


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc.strerror or exc}") from None


def _file_stamp(path: str | None) -> tuple[int, int, int] | None:
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class DynamicAuthnConfig:
    """Keeps :class:`AuthnConfig` current from flag files and the cluster ConfigMap."""

    def __init__(
        self,
        flags: AuthFlags,
        kube_api: KubeAuthAPI | None = None,
        *,
        skip_lookup: bool = False,
        tolerate_lookup_failure: bool = False,
        file_check_interval: float = 1.0,
        watch_timeout_seconds: int = 60,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.flags = flags
        self.kube_api = kube_api
        self.tolerate_lookup_failure = tolerate_lookup_failure
        self.file_check_interval = file_check_interval
        self.watch_timeout_seconds = watch_timeout_seconds
        self._clock = clock
        need_cluster = not (flags.client_ca_file and flags.requestheader_client_ca_file)
        self.uses_configmap = need_cluster and not skip_lookup and kube_api is not None
        self._cm_data: dict[str, str] | None = None
        self._file_stamps: tuple[object, ...] = ()
        self._lock = threading.Lock()
        self._version = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.current = AuthnConfig()

    # -- building snapshots ---------------------------------------------------------------------
    def _stamps(self) -> tuple[object, ...]:
        return (_file_stamp(self.flags.client_ca_file), _file_stamp(self.flags.requestheader_client_ca_file))

    def _build(self, cm_data: dict[str, str] | None) -> AuthnConfig:
        flags = self.flags
        client_ca: CABundle | None = None
        if flags.client_ca_file:
            client_ca = CABundle(_read_file(flags.client_ca_file, "--client-ca-file"), "--client-ca-file")
        elif cm_data and cm_data.get("client-ca-file", "").strip():
            client_ca = CABundle(cm_data["client-ca-file"].encode(), "client-ca-file (ConfigMap)")

        request_header: RequestHeaderConfig | None = None
        if flags.requestheader_client_ca_file:
            ca = CABundle(
                _read_file(flags.requestheader_client_ca_file, "--requestheader-client-ca-file"),
                "--requestheader-client-ca-file",
            )
            request_header = RequestHeaderConfig(
                ca=ca,
                allowed_names=tuple(n for n in flags.requestheader_allowed_names if n),
                username_headers=_norm_headers(flags.requestheader_username_headers, DEFAULT_USERNAME_HEADERS),
                group_headers=_norm_headers(flags.requestheader_group_headers, DEFAULT_GROUP_HEADERS),
                extra_prefixes=_norm_headers(flags.requestheader_extra_headers_prefix, DEFAULT_EXTRA_PREFIXES),
                uid_headers=_norm_headers(flags.requestheader_uid_headers, ()),
            )
        elif cm_data and cm_data.get("requestheader-client-ca-file", "").strip():
            ca = CABundle(cm_data["requestheader-client-ca-file"].encode(), "requestheader-client-ca-file (ConfigMap)")
            request_header = RequestHeaderConfig(
                ca=ca,
                allowed_names=tuple(n for n in _json_list(cm_data, "requestheader-allowed-names") if n),
                username_headers=_norm_headers(
                    _json_list(cm_data, "requestheader-username-headers"), DEFAULT_USERNAME_HEADERS
                ),
                group_headers=_norm_headers(_json_list(cm_data, "requestheader-group-headers"), DEFAULT_GROUP_HEADERS),
                extra_prefixes=_norm_headers(
                    _json_list(cm_data, "requestheader-extra-headers-prefix"), DEFAULT_EXTRA_PREFIXES
                ),
                uid_headers=_norm_headers(_json_list(cm_data, "requestheader-uid-headers"), ()),
            )
        self._version += 1
        return AuthnConfig(client_ca=client_ca, request_header=request_header, version=self._version)

    def _install(self, cm_data: dict[str, str] | None, stamps: tuple[object, ...], why: str) -> bool:
        """Build and swap in a new snapshot; on bad input keep the previous one (and say why)."""
        with self._lock:
            try:
                config = self._build(cm_data)
            except ValueError as exc:
                log.error("authentication configuration not updated (%s): %s", why, exc)
                self._file_stamps = stamps  # do not retry the same broken input every second
                return False
            self._cm_data = cm_data
            self._file_stamps = stamps
            self.current = config
        log.info(
            "authentication configuration loaded (%s): client CA %s, front-proxy CA %s",
            why,
            "set" if config.client_ca else "none",
            "set" if config.request_header else "none",
        )
        return True

    # -- lifecycle -----------------------------------------------------------------------------
    def load_initial(self) -> None:
        """Load synchronously at startup. Bad flag files raise ValueError; a failed ConfigMap lookup
        raises KubeAPIError unless ``tolerate_lookup_failure``."""
        stamps = self._stamps()
        cm_data: dict[str, str] | None = None
        if self.uses_configmap:
            assert self.kube_api is not None
            try:
                cm_data, _ = self.kube_api.get_configmap(AUTH_CONFIGMAP_NAMESPACE, AUTH_CONFIGMAP_NAME)
                if cm_data is None:
                    log.warning(
                        "ConfigMap %s/%s not found: no client CA / front-proxy configuration from the cluster",
                        AUTH_CONFIGMAP_NAMESPACE,
                        AUTH_CONFIGMAP_NAME,
                    )
            except KubeAPIError as exc:
                if not self.tolerate_lookup_failure:
                    raise KubeAPIError(
                        f"{exc}; the adapter needs to read {AUTH_CONFIGMAP_NAMESPACE}/{AUTH_CONFIGMAP_NAME} "
                        "(RoleBinding to extension-apiserver-authentication-reader) or "
                        "--authentication-tolerate-lookup-failure"
                    ) from None
                log.warning("authentication ConfigMap lookup failed, continuing without it: %s", exc)
        with self._lock:
            self.current = self._build(cm_data)
            self._cm_data = cm_data
            self._file_stamps = stamps

    def check_files(self) -> bool:
        """Reload if a flag file changed (two stat calls)."""
        stamps = self._stamps()
        if stamps == self._file_stamps:
            return False
        return self._install(self._cm_data, stamps, "file changed")

    def apply_configmap(self, data: dict[str, str] | None) -> bool:
        if data == self._cm_data:
            return False
        return self._install(data, self._stamps(), "ConfigMap changed")

    def start(self) -> None:
        """Background thread: file polling and (when used) a ConfigMap list+watch loop."""
        if self._thread is not None:
            return
        if not (self.flags.client_ca_file or self.flags.requestheader_client_ca_file or self.uses_configmap):
            return
        self._thread = threading.Thread(target=self._run, name="authn-config", daemon=True)
        self._thread.start()
        if self.uses_configmap:
            threading.Thread(target=self._watch_loop, name="authn-configmap-watch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.file_check_interval):
            try:
                self.check_files()
            except Exception:
                log.exception("checking authentication files failed")

    def _watch_loop(self) -> None:
        assert self.kube_api is not None
        backoff = 1.0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                data, rv = self.kube_api.get_configmap(AUTH_CONFIGMAP_NAMESPACE, AUTH_CONFIGMAP_NAME)
                self.apply_configmap(data)
                for _kind, event_data, _rv in self.kube_api.watch_configmap(
                    AUTH_CONFIGMAP_NAMESPACE, AUTH_CONFIGMAP_NAME, rv, self.watch_timeout_seconds
                ):
                    if self._stop.is_set():
                        return
                    self.apply_configmap(event_data)
                backoff = 1.0
                # A watch that ends at once (server without watch support) must not become a busy loop.
                if time.monotonic() - started < 1.0 and self._stop.wait(1.0):
                    return
            except Exception as exc:  # noqa: BLE001
                log.warning(
                    "watching %s/%s failed, retrying in %.0fs: %s",
                    AUTH_CONFIGMAP_NAMESPACE,
                    AUTH_CONFIGMAP_NAME,
                    backoff,
                    exc,
                )
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 30.0)

    def client_ca_pems(self) -> bytes | None:
        """Union of client CA and front-proxy CA (for ServingOptions.client_ca_pems)."""
        return self.current.client_ca_pems()
