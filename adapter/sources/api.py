"""`api` source: an HTTP(S) GET that returns the seed's item document (DESIGN §2).

    {"items": [{"start": 1700545800, "end": 1700545860, "values": {"scheduledMessage": 50}, "id": "b1"}]}

A document that is not this format at all (not JSON, no `items` list, too many items, every item
invalid) fails the fetch, so the runner keeps the last good snapshot and eventually marks the source
stale. A single invalid item inside an otherwise good document is skipped and reported in
`last_warnings`: one typo must not hide a whole batch of announced work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.errors import SourceError
from adapter.items import Item, ItemError, dedupe, parse_item
from adapter.resources import reject_unknown
from adapter.sources.base import CommonSourceSettings, Source, SourceContext
from adapter.sources.http import (
    HTTP_OPTION_FIELDS,
    HttpClient,
    HttpOptions,
    parse_http_options,
    resolve_headers,
    safe_url,
)

MAX_ITEMS = 100_000
MAX_WARNINGS = 20


@dataclass(frozen=True)
class ApiConfig:
    http: HttpOptions


class ApiSource(Source):
    kind = "api"
    default_interval = 30.0

    def __init__(self, config: ApiConfig, common: CommonSourceSettings, context: SourceContext):
        super().__init__(config, common, context)
        allow = config.http.allow_link_local or context.allow_private_networks
        self._client = HttpClient(config.http.tls, allow_link_local=allow)
        # Messages about skipped items of the last successful fetch (capped), for status.
        self.last_warnings: list[str] = []
        self.last_skipped: int = 0

    @classmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> ApiConfig:
        reject_unknown(spec, HTTP_OPTION_FIELDS, path)
        return ApiConfig(http=parse_http_options(spec, path))

    def describe(self) -> str:
        return f"api {safe_url(self.config.http.url)}"

    async def fetch(self, now: float) -> list[Item]:
        http: HttpOptions = self.config.http
        response = await self._client.get(http.url, timeout=self.common.timeout,
                                          max_bytes=http.max_response_bytes,
                                          headers=resolve_headers(http.headers, self.context))
        response.check_ok()
        items, warnings, skipped = parse_items_document(response.body, response.url)
        self.last_warnings = warnings
        self.last_skipped = skipped
        return items

    async def close(self) -> None:
        await self._client.aclose()


def load_json(body: bytes, where: str) -> Any:
    """Parse JSON strictly enough for untrusted input; errors become SourceError naming `where`."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceError(f"{where}: response is not UTF-8 text") from None
    try:
        # Huge integer literals would raise deep inside json (int digit limit); read them as floats
        # so parse_item reports "outside ±1e15" for that one item instead.
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        snippet = " ".join(text[:60].split())
        raise SourceError(f"{where}: response is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}; "
                          f"starts with {snippet!r})") from None
    except RecursionError:
        raise SourceError(f"{where}: response JSON is nested too deeply") from None
    except ValueError as exc:
        raise SourceError(f"{where}: response is not usable JSON: {exc}") from None


def _parse_int(text: str) -> int | float:
    return int(text) if len(text) <= 30 else float(text)


def parse_items_document(body: bytes, where: str) -> tuple[list[Item], list[str], int]:
    """Items of a seed-format document, the warnings for skipped items, and how many were skipped."""
    document = load_json(body, where)
    if not isinstance(document, dict):
        raise SourceError(f"{where}: expected a JSON object with an \"items\" list, got {_json_type(document)}")
    if "items" not in document:
        raise SourceError(f"{where}: the JSON object has no \"items\" key (expected {{\"items\": [...]}})")
    raw_items = document["items"]
    if raw_items is None:
        raw_items = []
    if not isinstance(raw_items, list):
        raise SourceError(f"{where}: \"items\" must be a list, got {_json_type(raw_items)}")
    if len(raw_items) > MAX_ITEMS:
        raise SourceError(f"{where}: {len(raw_items)} items is more than the limit of {MAX_ITEMS}")
    items: list[Item] = []
    warnings: list[str] = []
    skipped = 0
    for index, raw in enumerate(raw_items):
        try:
            items.append(parse_item(raw, f"items[{index}]"))
        except ItemError as exc:
            skipped += 1
            if len(warnings) < MAX_WARNINGS:
                warnings.append(str(exc))
    if raw_items and not items:
        # Every item wrong (e.g. milliseconds instead of seconds) means the format is wrong: fail,
        # so the source goes stale visibly instead of silently serving the default value.
        raise SourceError(f"{where}: all {len(raw_items)} items are invalid; first: {warnings[0]}")
    if skipped > len(warnings):
        warnings.append(f"... and {skipped - len(warnings)} more invalid items")
    return dedupe(items), warnings, skipped


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            int: "number", float: "number"}.get(type(value), type(value).__name__)
