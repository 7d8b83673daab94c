"""Save and restore what adapter.logs.configure changes, so a test that runs the CLI in-process
leaves the logging of later tests (caplog levels) as it found it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from adapter import logs


@contextlib.contextmanager
def preserved_logging() -> Iterator[None]:
    root = logging.getLogger()
    names = (*logs.OUR_LOGGERS, *logs.LIBRARY_LOGGERS, logs.ACCESS_LOGGER)
    saved = {
        name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers), logging.getLogger(name).propagate)
        for name in names
    }
    root_saved = (root.level, list(root.handlers))
    try:
        yield
    finally:
        root.setLevel(root_saved[0])
        root.handlers[:] = root_saved[1]
        for name, (level, handlers, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate = propagate
