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
