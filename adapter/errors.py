"""Errors shared by every layer. Each says which object and which field path is wrong."""

from __future__ import annotations


class ValidationError(ValueError):
    """A manifest field that cannot be accepted.

    `obj` is "Kind/name" (or a file position), `path` a JSON-path-like field path such as
    `spec.metrics[0].value.expression`, so `kubectl`-style users can find the field at once.
    """

    def __init__(self, path: str, message: str, obj: str | None = None):
        self.obj = obj
        self.path = path
        self.detail = message
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.obj}: " if self.obj else ""
        return f"{where}{self.path}: {self.detail}" if self.path else f"{where}{self.detail}"

    def for_object(self, obj: str) -> ValidationError:
        """The same error, attributed to an object (kept when already attributed)."""
        return self if self.obj else ValidationError(self.path, self.detail, obj)


class SourceError(RuntimeError):
    """A fetch that failed; the message is safe to show in status and logs (no secrets).

    `retry_soon=False` says retrying sooner than the source's interval cannot help (the object's own
    configuration is at fault, e.g. a calendar that expands beyond its limit): the runner then skips
    its quick backoff, which would only burn CPU on the same failure again and again."""

    def __init__(self, message: str, *, retry_soon: bool = True) -> None:
        super().__init__(message)
        self.retry_soon = retry_soon


def forget_frames(exc: BaseException) -> None:
    """Drop what a handled failure still references: its traceback and the chain before it.

    asyncio.wait_for keeps an exception in a reference cycle (task -> exception -> traceback ->
    wait_for's frame -> task), and the frames hold the fetch's locals (a calendar's partial
    expansion: thousands of items). The server freezes the heap after each publication (adapter.heap),
    so cyclic garbage that is still waiting for a collection stays until the next full one: 10 000
    calendars failing every interval took 200 MB that way. Without the traceback there is no cycle,
    and reference counting frees it all at once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = None
        current = current.__context__ or current.__cause__
