"""Local mode: VirtualMetric / VirtualMetricEvent manifests from YAML files, reloaded on change.

`prescaler serve --manifests PATH [...]` with files or directories (searched recursively for
*.yaml / *.yml / *.json, multi-document). The embedded default for local runs and tests.

- A file that fails to parse keeps the last good version of its objects; the error is logged and
  kept in `errors` (shown by /readyz detail and logs) until the file is fixed.
- Invalid objects are handed to the engine like valid ones: it records their errors per object,
  so one bad object never hides the others.
- `kind: Secret` documents (data or stringData) serve as the secret store for source headers.
- `on_documents` (optional) sees every document after each reload: HorizontalPodPrescalers are
  checked against the HPAs in the same files that way (adapter/store/hpp_local.py).
- Other kinds (an HPA beside the metrics, say) are ignored; a document that looks meant for
  prescaler (its group, or a kind close to ours such as `VirtualMetrics`) but is none of its kinds
  is a warning: logged once and kept in `warnings` (`prescaler preview` prints them).
- A reload never stops at one bad file or object: an unreadable file keeps its last good objects,
  an object the sink cannot take is left out (and logged), and everything else is applied.
- YAML aliases are bounded: a file whose aliases would expand to more than MAX_ALIAS_EXPANSION
  nodes (a "billion laughs" document is 478 bytes) is refused with a clear error, before anything
  walks the expanded structure.
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from adapter.resources import GROUP, KIND_EVENT, KIND_METRIC
from adapter.yamlload import FastSafeLoader

log = logging.getLogger("prescaler.manifests")

MAX_FILE_BYTES = 8 * 1024 * 1024  # default of --max-manifest-bytes
# Nodes that aliases may add to a file when expanded (anchors for shared headers or labels reused a
# few dozen times stay far below; 9 levels of 9 aliases would be 387 420 489).
MAX_ALIAS_EXPANSION = 100_000
# libyaml's loader when PyYAML was built with it: the same safe subset, many times faster; a bad
# date or integer scalar is a YAML error with its line, like a syntax error (adapter.yamlload).
_SafeLoader = FastSafeLoader
_SUFFIXES = (".yaml", ".yml", ".json")
OWN_KINDS = (KIND_METRIC, KIND_EVENT, "HorizontalPodPrescaler")  # the kinds of prescaler's API group


class ManifestError(ValueError):
    pass


@dataclass
class _FileState:
    stamp: tuple[int, int, int] | None = None
    docs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


class ManifestStore:
    """Feeds an ObjectSink (the engine) from files; `poll()` re-reads what changed."""

    def __init__(
        self, sink: Any, paths: Iterable[str], poll_interval: float = 1.0, max_file_bytes: int = MAX_FILE_BYTES
    ):
        self.sink = sink
        self.max_file_bytes = max_file_bytes
        self.paths = [Path(p) for p in paths]
        self.poll_interval = poll_interval
        self.files: dict[Path, _FileState] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.on_documents: Callable[[list[dict[str, Any]]], None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.warnings: list[str] = []  # documents ignored that look meant for prescaler
        self._warned: set[str] = set()
        for path in self.paths:
            if not path.exists():
                raise ManifestError(f"--manifests {path}: no such file or directory")

    @property
    def errors(self) -> dict[str, str]:
        return {str(p): s.error for p, s in self.files.items() if s.error}

    def discover(self) -> list[Path]:
        found: list[Path] = []
        for path in self.paths:
            if path.is_dir():
                found.extend(sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file()))
            elif path.is_file():
                found.append(path)
        return found

    def poll(self) -> bool:
        """Re-read changed, new and removed files; push a full resync when anything changed."""
        files = self._read()
        if files is None:
            return False
        self.files = files
        self._push()
        return True

    def _read(self) -> dict[Path, _FileState] | None:
        """The files as they are now (None: nothing changed). Leaves `self.files` alone, so the
        reading and parsing (seconds for a file of 10 000 objects) can run off the event loop."""
        current = self.discover()
        files: dict[Path, _FileState] = {}
        changed = False
        for path in current:
            known = self.files.get(path)
            try:
                stat = path.stat()
            except OSError:
                if known is not None:
                    files[path] = known  # mid-replace: look again at the next poll
                continue
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if known is not None and known.stamp == stamp:
                files[path] = known
                continue
            changed = True
            state = files[path] = _FileState(stamp, known.docs if known else [], known.error if known else None)
            try:
                state.docs = load_documents(path, self.max_file_bytes)
                if state.error:
                    log.info("%s: fixed, reloaded", path)
                state.error = None
            except ManifestError as exc:
                state.error = str(exc)
                log.error("%s (keeping the last good version of its objects)", exc)
            except Exception as exc:  # noqa: BLE001 - one file must never stop the others
                state.error = f"{path}: cannot load: {type(exc).__name__}: {exc}"
                log.error("%s (keeping the last good version of its objects)", state.error)
        changed = changed or any(path not in files for path in self.files)
        return files if changed else None

    def _push(self) -> None:
        metrics: dict[str, dict[str, Any]] = {}
        events: dict[str, dict[str, Any]] = {}
        secrets: dict[tuple[str, str], dict[str, str]] = {}
        warnings: list[str] = []
        for path in sorted(self.files):
            for doc in self.files[path].docs:
                kind = doc.get("kind")
                raw_meta = doc.get("metadata")
                meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
                name = meta.get("name")
                if kind in (KIND_METRIC, KIND_EVENT):
                    target = metrics if kind == KIND_METRIC else events
                    key = name if isinstance(name, str) else f"<unnamed in {path}>"
                    if key in target:
                        log.warning("%s %s is defined more than once; %s wins", kind, key, path)
                    target[key] = doc
                elif kind == "Secret" and isinstance(name, str):
                    secrets[(str(meta.get("namespace") or "default"), name)] = _secret_data(doc)
                elif (warning := _unknown_kind_warning(doc, path)) is not None:
                    warnings.append(warning)
        for warning in warnings:
            if warning not in self._warned:
                log.warning("%s", warning)
        self.warnings, self._warned = warnings, set(warnings)
        self.secrets = secrets
        self._resync(KIND_METRIC, list(metrics.values()))
        self._resync(KIND_EVENT, list(events.values()))
        if self.on_documents is not None:
            try:
                self.on_documents([doc for path in sorted(self.files) for doc in self.files[path].docs])
            except Exception:  # noqa: BLE001 - the objects above are applied whatever this does
                log.exception("checking the reloaded documents failed")

    def _resync(self, kind: str, docs: list[dict[str, Any]]) -> None:
        """Hand `docs` to the sink; if that fails, apply them one by one, leave out (and log) the ones
        the sink cannot take and resync with the rest, so valid edits to other objects still apply.
        (Effective when the sink applies synchronously, as the engine does on its own loop, where
        this store runs.)"""
        try:
            self.sink.resync(kind, docs)
            return
        except Exception as exc:  # noqa: BLE001 - isolated below, object by object
            log.error(
                "applying %d %s objects failed (%s: %s); applying them one at a time",
                len(docs),
                kind,
                type(exc).__name__,
                exc,
            )
        accepted: list[dict[str, Any]] = []
        for doc in docs:
            try:
                self.sink.apply(doc)
            except Exception as exc:  # noqa: BLE001 - this object is left out, the others go on
                log.error("%s %s left out of the reload: %s: %s", kind, _name_of(doc), type(exc).__name__, exc)
                continue
            accepted.append(doc)
        try:
            self.sink.resync(kind, accepted)  # also removes the objects no file defines any more
        except Exception:  # noqa: BLE001 - logged; the next change retries
            log.exception("applying %s objects failed", kind)

    def resolve_secret(self, namespace: str, name: str, key: str) -> str:
        data = self.secrets.get((namespace, name))
        if data is None:
            raise LookupError(f"secret {namespace}/{name} not found in the manifests")
        if key not in data:
            raise LookupError(f"secret {namespace}/{name} has no key {key!r}")
        return data[key]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                files = await asyncio.to_thread(self._read)  # YAML parsing off the loop
                if files is not None:
                    self.files = files
                    self._push()
            except Exception:
                log.exception("reloading manifests failed")

    def start(self) -> None:
        self.poll()
        self._task = asyncio.get_running_loop().create_task(self.run(), name="manifest-reload")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


def load_documents(path: Path, max_bytes: int = MAX_FILE_BYTES) -> list[dict[str, Any]]:
    """All mapping documents of a YAML (or JSON) file. Raises ManifestError naming file and line."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ManifestError(
                f"{path}: {size} bytes is larger than the limit of {max_bytes} bytes "
                f"(raise it with --max-manifest-bytes)"
            )
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ManifestError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    docs = _load_json(text)
    if docs is None:
        docs = _load_yaml(path, text)
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ManifestError(f"{path}: document {index + 1} is not a mapping (got {type(doc).__name__})")
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out.extend(d for d in doc["items"] if isinstance(d, dict))
        else:
            out.append(doc)
    return out


def _load_json(text: str) -> list[Any] | None:
    """The fast path: a file that is one JSON object (what `kubectl get -o json` or a generator
    writes) is also valid YAML, and json reads it tens of times faster than PyYAML's constructor.
    None when the text is not JSON; the YAML loader then decides (and words any error)."""
    if not text.lstrip()[:1] == "{":
        return None
    try:
        # JSON's NaN/Infinity are not YAML: leave such text to the YAML loader.
        return [json.loads(text, parse_constant=_reject_constant)]
    except (ValueError, RecursionError):
        return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load_yaml(path: Path, text: str) -> list[Any]:
    try:
        if "&" in text:  # no anchor, no alias: skip the extra pass
            _check_alias_expansion(path, text)
        return list(yaml.load_all(text, Loader=_SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"{path}:{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise ManifestError(f"{path}: invalid YAML: nested too deeply") from None


def _check_alias_expansion(path: Path, text: str) -> None:
    """Refuse a file whose aliases expand to more than MAX_ALIAS_EXPANSION nodes.

    The loader itself shares aliased objects (cheap), but everything after it (validation, str() of
    a Secret value, JSON) walks the expanded tree. Sizes are counted on the parser's events, so the
    check costs one pass and never builds the expansion."""
    sizes: dict[str, int] = {}
    open_nodes: list[list[Any]] = []  # [anchor, node count so far]
    expansion = 0

    def add(count: int) -> None:
        if open_nodes:
            open_nodes[-1][1] += count

    for event in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            count = sizes.get(event.anchor or "", 1)
            expansion += count
            if expansion > MAX_ALIAS_EXPANSION:
                mark = event.start_mark
                raise ManifestError(
                    f"{path}: line {mark.line + 1}: YAML aliases expand to more than {MAX_ALIAS_EXPANSION} nodes "
                    "(an alias bomb?); write the values out or use fewer aliases"
                )
            add(count)
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor:
                sizes[event.anchor] = 1
            add(1)
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_nodes.append([event.anchor, 1])
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, count = open_nodes.pop()
            if anchor:
                sizes[anchor] = count
            add(count)
        elif isinstance(event, yaml.DocumentStartEvent):
            sizes.clear()  # anchors are scoped to their document


def _name_of(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else "<unnamed>"


def _secret_data(doc: Mapping[str, Any]) -> dict[str, str]:
    data: dict[str, str] = {}
    name = _name_of(doc)
    raw, string_data = doc.get("data") or {}, doc.get("stringData") or {}
    for field_name, section in (("data", raw), ("stringData", string_data)):
        if not isinstance(section, Mapping):
            log.warning("Secret %s: %s is not a mapping of keys to strings; ignored", name, field_name)
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            try:
                data[str(key)] = base64.b64decode(str(value), validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                log.warning("Secret %s: data.%s is not valid base64 text", name, key)
    if isinstance(string_data, Mapping):
        for key, value in string_data.items():
            if isinstance(value, (dict, list)):
                log.warning("Secret %s: stringData.%s is not a string; ignored", name, key)
                continue
            data[str(key)] = str(value)
    return data


def env_paths(value: str | None) -> list[str]:
    return [p for p in (value or "").split(os.pathsep) if p]


def _unknown_kind_warning(doc: Mapping[str, Any], path: Path) -> str | None:
    """A warning for a document meant for prescaler that is neither of its kinds (None: not ours)."""
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if kind in OWN_KINDS:
        return None
    ours = isinstance(api_version, str) and api_version.split("/")[0] == GROUP
    # Near misses of the two kinds users write by hand (HorizontalPodPrescaler is one edit from
    # HorizontalPodAutoscaler, a kind that legitimately sits beside it).
    by_lower = {k.lower(): k for k in (KIND_METRIC, KIND_EVENT)}
    close = difflib.get_close_matches(kind.lower(), list(by_lower), 1, 0.8) if isinstance(kind, str) else []
    if not ours and not close:
        return None
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    hint = f" (did you mean {by_lower[close[0]]}?)" if close else ""
    return (
        f"{path}: ignored document kind {kind!r} ({api_version}, name {name!r}): prescaler knows "
        f"{', '.join(OWN_KINDS)} only{hint}"
    )
