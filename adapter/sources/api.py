"""`api` source: an HTTP(S) GET that returns the seed's item document.

    {"items": [{"start": 1700545800, "end": 1700545860, "values": {"scheduledMessage": 50}, "id": "b1"}]}

A document that is not this format at all (not JSON, no `items` list, too many items, every item
invalid) fails the fetch, so the runner keeps the last good snapshot and eventually marks the source
stale. A single invalid item inside an otherwise good document is skipped and reported in the fetch
result's warnings: one typo must not hide a whole batch of announced work.

The body is read off the event loop, element by element: a document with more than MAX_ITEMS items
is refused as soon as the reader passes the limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.errors import SourceError
from adapter.fields import reject_unknown
from adapter.items import Item, ItemError, parse_item
from adapter.sources.base import MAX_WARNINGS, CommonSourceSettings, FetchResult, Source, SourceContext
from adapter.sources.http import (
    HTTP_OPTION_FIELDS,
    HttpClient,
    HttpOptions,
    HttpResponse,
    get_document,
    parse_http_options,
    safe_url,
)
from adapter.sources.jsonbody import json_type, read_member_array

MAX_ITEMS = 100_000


@dataclass(frozen=True)
class ApiConfig:
    http: HttpOptions


class ApiSource(Source[ApiConfig]):
    kind = "api"
    default_interval = 30.0

    def __init__(self, config: ApiConfig, common: CommonSourceSettings, context: SourceContext):
        super().__init__(config, common, context)
        allow = config.http.allow_link_local or context.allow_private_networks
        self._client = HttpClient(config.http.tls, allow_link_local=allow)

    @classmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> ApiConfig:
        reject_unknown(spec, HTTP_OPTION_FIELDS, path)
        return ApiConfig(http=parse_http_options(spec, path))

    def describe(self) -> str:
        return f"api {safe_url(self.config.http.url)}"

    async def fetch(self, now: float) -> FetchResult:
        return await get_document(
            self._client, self.config.http, self.context, timeout=self.common.timeout, parse=parse_items_response
        )

    async def close(self) -> None:
        await self._client.aclose()


def parse_items_response(response: HttpResponse) -> FetchResult:
    response.check_ok()
    return parse_items_document(response.body, response.url)


def parse_items_document(body: bytes, where: str) -> FetchResult:
    """Items of a seed-format document, with warnings for the items that were skipped."""
    document = read_member_array(body, "items", where, MAX_ITEMS)
    if not document.is_object:
        raise SourceError(f'{where}: expected a JSON object with an "items" list, got {json_type(document.value)}')
    if not document.found:
        raise SourceError(f'{where}: the JSON object has no "items" key (expected {{"items": [...]}})')
    raw_items = document.value if document.value is not None else []
    if not isinstance(raw_items, list):
        raise SourceError(f'{where}: "items" must be a list, got {json_type(raw_items)}')
    items: list[Item] = []
    warnings: list[str] = []
    skipped = 0
    for index, raw in enumerate(raw_items):
        try:
            items.append(parse_item(raw, f"items[{index}]"))
        except ItemError as exc:
            skipped += 1
            if len(warnings) < MAX_WARNINGS - 1:
                warnings.append(str(exc))
    if raw_items and not items:
        # Every item wrong (e.g. milliseconds instead of seconds) means the format is wrong: fail,
        # so the source goes stale visibly instead of silently serving the default value.
        raise SourceError(f"{where}: all {len(raw_items)} items are invalid; first: {warnings[0]}")
    if skipped > len(warnings):
        warnings.append(f"... and {skipped - len(warnings)} more invalid items")
    return FetchResult(items=items, warnings=warnings)
