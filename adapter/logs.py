"""Logging like a Kubernetes component: ``--v`` levels, ``--logging-format=text|json``, one namespace.

Verbosity (``--v``), as klog users expect it:

====  ==========================================================================================
0     prescaler warnings and errors only
1-2   + prescaler's informational lines (the default is 1); libraries stay at warnings
3     + prescaler debug lines and the HTTP access log
4-5   + libraries' informational lines (uvicorn, aiohttp, httpx, kubernetes client)
>= 6  + libraries' debug lines
====  ==========================================================================================

One namespace: every record is shown under ``prescaler.*`` whatever module logged it. Modules use
``logging.getLogger(__name__)`` (``adapter.engine`` ...), so the handler renames ``adapter.X`` to
``prescaler.X``; uvicorn's loggers become ``prescaler.http`` and ``prescaler.http.access``, so the
access log goes through the same formatter (text or JSON) as everything else instead of uvicorn's own
handlers. The server must create ``uvicorn.Config(log_config=None)`` for that (otherwise uvicorn
installs its own handlers with ``propagate=False``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")
DEFAULT_VERBOSITY = 1

# Third-party loggers kept quiet below --v=4.
LIBRARY_LOGGERS = (
    "uvicorn",
    "uvicorn.error",
    "uvicorn.asgi",
    "httpx",
    "httpcore",
    "aiohttp",
    "kubernetes",
    "urllib3",
    "asyncio",
    "matplotlib",
    "PIL",
    "multipart",
    "python_multipart",
    "fastapi",
    "celpy",
)
ACCESS_LOGGER = "uvicorn.access"
OUR_LOGGERS = ("prescaler", "adapter")

# Displayed names: the first matching prefix is replaced.
_RENAMES = (
    ("adapter", "prescaler"),
    ("uvicorn.access", "prescaler.http.access"),
    ("uvicorn.error", "prescaler.http"),
    ("uvicorn", "prescaler.http"),
)

_HANDLER_MARK = "_prescaler_handler"


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("logging")
    group.add_argument(
        "--v",
        "-v",
        dest="verbosity",
        type=int,
        default=DEFAULT_VERBOSITY,
        metavar="N",
        help="log verbosity: 0 warnings only, 1-2 info, 3 debug and access log, >= 4 library lines too",
    )
    group.add_argument(
        "--logging-format", choices=FORMATS, default="text", help="log line format: text, or json (one object per line)"
    )


def display_name(name: str) -> str:
    for prefix, replacement in _RENAMES:
        if name == prefix or name.startswith(prefix + "."):
            return replacement + name[len(prefix) :]
    return name


def our_level(verbosity: int) -> int:
    if verbosity <= 0:
        return logging.WARNING
    return logging.INFO if verbosity < 3 else logging.DEBUG


def library_level(verbosity: int) -> int:
    if verbosity < 4:
        return logging.WARNING
    return logging.INFO if verbosity < 6 else logging.DEBUG


def access_log_enabled(verbosity: int) -> bool:
    return verbosity >= 3


def uvicorn_log_level(verbosity: int) -> str:
    """uvicorn.Config(log_level=...) sets uvicorn's loggers to this level, the access logger included."""
    return "info" if verbosity >= 3 else "warning"


class _Base(logging.Formatter):
    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if record.name == ACCESS_LOGGER and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, http_version, status = record.args
            out.update(client=client, method=method, path=path, status=status)
        return out


class TextFormatter(_Base):
    """``2026-12-01T01:02:03.456Z INFO prescaler.engine: message``"""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = f"{stamp}.{int(record.msecs):03d}Z {record.levelname} {display_name(record.name)}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(_Base):
    """One JSON object per line with the fields of Kubernetes' JSON log format (ts, caller, msg, v)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": display_name(record.name),
            "caller": f"{record.filename}:{record.lineno}",
            "msg": record.getMessage(),
            # klog's "v": 0 for warnings and up, else the verbosity the line needs to show.
            "v": 0 if record.levelno >= logging.INFO else 3,
        }
        doc.update(self.fields(record))
        if record.exc_info:
            doc["err"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure(verbosity: int = DEFAULT_VERBOSITY, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Install one handler on the root logger and set every logger's level from ``verbosity``.
    Safe to call again (replaces the handler it installed before)."""
    if fmt not in FORMATS:
        raise ValueError(f"--logging-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(min(our_level(verbosity), library_level(verbosity)))
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(our_level(verbosity))
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(library_level(verbosity))
        logger.propagate = True
    access = logging.getLogger(ACCESS_LOGGER)
    access.setLevel(logging.INFO if access_log_enabled(verbosity) else logging.WARNING)
    access.propagate = True
    for name in (*LIBRARY_LOGGERS, ACCESS_LOGGER):
        # uvicorn's default config would have attached its own handlers; one format means ours only.
        logging.getLogger(name).handlers = []


class BurstLimit:
    """At most `burst` lines per `window` seconds for one kind of message from many objects.

    Ten thousand calendars refused by the same budget each said so at once: 10 000 lines, a fifth of
    the event loop's time while they started. Each object's status still says it; the log gives the
    first `burst` of each window and then, with its next line, how many it left out."""

    def __init__(self, burst: int, window: float, clock: Any = time.monotonic) -> None:
        self.burst, self.window, self._clock = burst, window, clock
        self._window_start = -float("inf")
        self._in_window = 0
        self._left_out = 0

    def allow(self) -> tuple[bool, int]:
        """(log this line?, lines left out before it that it should mention)."""
        now = self._clock()
        if now - self._window_start >= self.window:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self.burst:
            self._left_out += 1
            return False, 0
        self._in_window += 1
        left_out, self._left_out = self._left_out, 0
        return True, left_out
