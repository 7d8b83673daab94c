"""The outermost ASGI layer: counts the HTTP requests being answered.

Long jobs on the event loop (applying a list of objects, publishing a source's snapshot) pause after
each piece for as long as the piece took, so that requests in flight get their turns of the loop
(adapter.handoff). With no request being answered that pause only delays the job: the record of
requests lets them skip it."""

from __future__ import annotations

from typing import Any

from adapter.handoff import RequestActivity


class CountRequests:
    def __init__(self, app: Any, activity: RequestActivity) -> None:
        self.app, self.activity = app, activity

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.activity.started()
        try:
            await self.app(scope, receive, send)
        finally:
            self.activity.finished()
