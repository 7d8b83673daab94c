"""`prometheus` source: a PromQL instant query whose current value becomes an item.

    prometheus:
      url: http://prometheus.monitoring:9090          # base URL (a path prefix is kept)
      query: sum by (service) (rate(http_requests_total[1m]))
      auth: {bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}
      tls: {caFile: /etc/prom/ca.crt}

Each returned series gives one item covering [now, now + interval) with values {"value": sample}
and the series' labels (a metric entry may take its target name from a label). The module also
offers `query_range` for history (used by the `forecast` source).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from adapter.errors import SourceError, ValidationError
from adapter.fields import expect_mapping, read_string, reject_unknown
from adapter.items import MAX_ABS_VALUE, Item
from adapter.sources.base import MAX_WARNINGS, CommonSourceSettings, FetchResult, Source, SourceContext
from adapter.sources.http import (
    HTTP_OPTION_FIELDS,
    HttpClient,
    HttpOptions,
    HttpResponse,
    SecretKeyRef,
    get_document,
    parse_http_options,
    parse_secret_key_ref,
    read_secret,
    read_text_file,
    safe_url,
)
from adapter.sources.jsonbody import load_json

MAX_SERIES = 10_000
# A series is two JSON objects (the series and its labels); decoding stops beyond this many.
MAX_OBJECTS = 2 * MAX_SERIES + 16
# Prometheus refuses range queries over 11,000 points per series; stay below it and split.
MAX_POINTS_PER_QUERY = 10_000
ENDPOINT_FIELDS = HTTP_OPTION_FIELDS + ("auth",)

Series = tuple[dict[str, str], np.ndarray, np.ndarray]  # (labels, timestamps, values)


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class PrometheusAuth:
    bearer_token: SecretKeyRef | None = None
    bearer_token_file: str | None = None
    username: str | None = None
    password: SecretKeyRef | None = None
    password_file: str | None = None


@dataclass(frozen=True)
class PrometheusEndpoint:
    http: HttpOptions
    auth: PrometheusAuth | None = None


@dataclass(frozen=True)
class PrometheusConfig:
    endpoint: PrometheusEndpoint
    query: str


def parse_endpoint(block: Mapping[str, Any], path: str) -> PrometheusEndpoint:
    """The connection part of a prometheus block (url, headers, auth, tls, limits)."""
    http = parse_http_options(block, path)
    auth = _parse_auth(block.get("auth"), f"{path}.auth")
    if auth is not None and any(h.name.lower() == "authorization" for h in http.headers):
        raise ValidationError(f"{path}.auth", "cannot be combined with an Authorization header")
    return PrometheusEndpoint(http=http, auth=auth)


def parse_query(block: Mapping[str, Any], path: str) -> str:
    query = read_string(block, "query", path, required=True, max_length=64 * 1024) or ""
    if not query.strip():
        raise ValidationError(f"{path}.query", "must not be empty")
    return query


def _parse_auth(raw: Any, path: str) -> PrometheusAuth | None:
    if raw is None:
        return None
    auth = expect_mapping(raw, path)
    reject_unknown(auth, ("bearerToken", "bearerTokenFile", "basic"), path)
    if len(auth) != 1:
        raise ValidationError(path, "exactly one of bearerToken, bearerTokenFile or basic is required")
    if "bearerToken" in auth:
        token = expect_mapping(auth["bearerToken"], f"{path}.bearerToken")
        reject_unknown(token, ("secretKeyRef",), f"{path}.bearerToken")
        if "secretKeyRef" not in token:
            raise ValidationError(f"{path}.bearerToken.secretKeyRef", "required")
        return PrometheusAuth(
            bearer_token=parse_secret_key_ref(token["secretKeyRef"], f"{path}.bearerToken.secretKeyRef")
        )
    if "bearerTokenFile" in auth:
        return PrometheusAuth(bearer_token_file=read_string(auth, "bearerTokenFile", path, required=True))
    basic_path = f"{path}.basic"
    basic = expect_mapping(auth["basic"], basic_path)
    reject_unknown(basic, ("username", "password", "passwordFile"), basic_path)
    username = read_string(basic, "username", basic_path, required=True, max_length=256) or ""
    if ":" in username:
        raise ValidationError(f"{basic_path}.username", "must not contain ':'")
    if ("password" in basic) == ("passwordFile" in basic):
        raise ValidationError(basic_path, "exactly one of password or passwordFile is required")
    if "passwordFile" in basic:
        return PrometheusAuth(
            username=username, password_file=read_string(basic, "passwordFile", basic_path, required=True)
        )
    password = expect_mapping(basic["password"], f"{basic_path}.password")
    reject_unknown(password, ("secretKeyRef",), f"{basic_path}.password")
    if "secretKeyRef" not in password:
        raise ValidationError(f"{basic_path}.password.secretKeyRef", "required")
    return PrometheusAuth(
        username=username,
        password=parse_secret_key_ref(password["secretKeyRef"], f"{basic_path}.password.secretKeyRef"),
    )


# ---------------------------------------------------------------- client


class PrometheusClient:
    """Queries one Prometheus HTTP API. Credentials are read per request (rotation is picked up)."""

    def __init__(self, endpoint: PrometheusEndpoint, context: SourceContext, timeout: float):
        self.endpoint = endpoint
        self.context = context
        self.timeout = timeout
        allow = endpoint.http.allow_link_local or context.allow_private_networks
        self._http = HttpClient(endpoint.http.tls, allow_link_local=allow)

    def describe(self) -> str:
        return f"prometheus {safe_url(self.endpoint.http.url)}"

    def _auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        auth = self.endpoint.auth
        if auth is None:
            return headers
        if auth.bearer_token is not None:
            headers["Authorization"] = (
                "Bearer " + read_secret(auth.bearer_token, self.context, "auth.bearerToken").strip()
            )
        elif auth.bearer_token_file is not None:
            headers["Authorization"] = "Bearer " + read_text_file(auth.bearer_token_file, "auth.bearerTokenFile")
        else:
            if auth.password is not None:
                password = read_secret(auth.password, self.context, "auth.basic.password").strip()
            else:
                password = read_text_file(auth.password_file or "", "auth.basic.passwordFile")
            pair = f"{auth.username}:{password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        for name, value in headers.items():
            if "\n" in value or "\r" in value:
                raise SourceError(f"header {name!r}: credential contains a line break")
        return headers

    async def api_get(self, api_path: str, params: Mapping[str, str]) -> Any:
        """GET {url}{api_path}; returns the `data` member of a successful response."""
        url = self.endpoint.http.url.rstrip("/") + api_path
        return await get_document(
            self._http,
            self.endpoint.http,
            self.context,
            timeout=self.timeout,
            parse=_api_data,
            url=url,
            params=params,
            extra_headers=self._auth_headers(),
        )

    async def query(self, query: str, at: float) -> dict[str, Any]:
        return await self.api_get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})

    async def query_range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        return await query_range(self, query, start, end, step)

    async def aclose(self) -> None:
        await self._http.aclose()


def _api_data(response: HttpResponse) -> Any:
    """The `data` member of a Prometheus API answer, or a SourceError that says what went wrong."""
    if response.body.lstrip()[:1] != b"{":  # a proxy's HTML error page, say
        response.check_ok()
        raise SourceError(f"{response.url}: response is not Prometheus JSON")
    document = load_json(response.body, response.url, max_objects=MAX_OBJECTS)
    if not isinstance(document, dict):
        raise SourceError(f"{response.url}: response is not a Prometheus API object")
    if document.get("status") != "success":
        if document.get("status") == "error":
            kind = _short(str(document.get("errorType", "error")), 40)
            raise SourceError(f"prometheus query failed: {kind}: {_short(str(document.get('error', '')), 400)}")
        response.check_ok()
        raise SourceError(f"{response.url}: unexpected status {_short(str(document.get('status')), 40)!r}")
    response.check_ok()
    data = document.get("data")
    if not isinstance(data, dict):
        raise SourceError(f"{response.url}: response has no data object")
    return data


async def query_range(client: PrometheusClient, query: str, start: float, end: float, step: float) -> list[Series]:
    """Range query over [start, end] at `step` seconds: one (labels, timestamps, values) per series.

    Long ranges are split into several requests (Prometheus caps points per series) and stitched
    together per label set. Samples are float64; NaN/Inf samples are kept (callers decide).
    """
    if not (step > 0 and end >= start):
        raise SourceError(f"invalid range query: start {start:g}, end {end:g}, step {step:g}")
    merged: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], list[np.ndarray], list[np.ndarray]]] = {}
    chunk_start = start
    while chunk_start <= end:
        chunk_end = min(end, chunk_start + (MAX_POINTS_PER_QUERY - 1) * step)
        data = await client.api_get(
            "/api/v1/query_range",
            {"query": query, "start": f"{chunk_start:.3f}", "end": f"{chunk_end:.3f}", "step": f"{step:g}"},
        )
        if data.get("resultType") != "matrix":
            raise SourceError(f"prometheus range query returned {data.get('resultType')!r}, expected matrix")
        result = data.get("result")
        if not isinstance(result, list):
            raise SourceError("prometheus range query: result is not a list")
        for series in result:
            labels = _labels(series)
            timestamps, values = _samples(series.get("values"))
            key = tuple(sorted(labels.items()))
            entry = merged.setdefault(key, (labels, [], []))
            entry[1].append(timestamps)
            entry[2].append(values)
        if len(merged) > MAX_SERIES:
            raise SourceError(f"prometheus range query returned more than {MAX_SERIES} series")
        chunk_start = chunk_end + step
    out: list[Series] = []
    for labels, ts_parts, value_parts in merged.values():
        timestamps = np.concatenate(ts_parts)
        values = np.concatenate(value_parts)
        timestamps, first = np.unique(timestamps, return_index=True)  # chunk edges may repeat a point
        out.append((labels, timestamps, values[first]))
    return out


def _labels(series: Any) -> dict[str, str]:
    if not isinstance(series, dict):
        raise SourceError("prometheus response: a series is not an object")
    metric = series.get("metric", {})
    if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        raise SourceError("prometheus response: series labels are not a map of strings")
    return dict(metric)


def _sample(raw: Any) -> tuple[float, float]:
    if not isinstance(raw, list) or len(raw) != 2:
        raise SourceError('prometheus response: a sample is not [timestamp, "value"]')
    try:
        return float(raw[0]), float(raw[1])
    except (TypeError, ValueError):
        raise SourceError(f"prometheus response: sample value {str(raw[1])[:40]!r} is not a number") from None


def _samples(raw: Any) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(raw, list):
        raise SourceError("prometheus response: series values are not a list")
    if not raw:
        return np.empty(0), np.empty(0)
    try:
        pairs = np.array(raw, dtype=object)
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError
        # Prometheus sends values as strings ("1.5", "NaN", "+Inf"); float() reads all of them.
        return pairs[:, 0].astype(float), pairs[:, 1].astype(float)
    except (TypeError, ValueError):
        raise SourceError('prometheus response: series values are not [timestamp, "value"] pairs') from None


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- the source


class PrometheusSource(Source[PrometheusConfig]):
    kind = "prometheus"
    default_interval = 30.0

    @classmethod
    def value_names(cls, config: PrometheusConfig) -> frozenset[str]:
        """Each series becomes an item with its sample as `value`."""
        return frozenset({"value"})

    def __init__(self, config: PrometheusConfig, common: CommonSourceSettings, context: SourceContext):
        super().__init__(config, common, context)
        self._client = PrometheusClient(config.endpoint, context, common.timeout)

    @classmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> PrometheusConfig:
        reject_unknown(spec, ENDPOINT_FIELDS + ("query",), path)
        return PrometheusConfig(endpoint=parse_endpoint(spec, path), query=parse_query(spec, path))

    def describe(self) -> str:
        return self._client.describe()

    async def fetch(self, now: float) -> FetchResult:
        data = await self._client.query(self.config.query, now)
        result_type, result = data.get("resultType"), data.get("result")
        end = now + self.common.interval
        warnings: list[str] = []
        samples: list[tuple[dict[str, str], float]]
        if result_type == "scalar":
            samples = [({}, _sample(result)[1])]
        elif result_type == "vector":
            if not isinstance(result, list):
                raise SourceError("prometheus response: vector result is not a list")
            if len(result) > MAX_SERIES:
                raise SourceError(f"prometheus query returned {len(result)} series, more than {MAX_SERIES}")
            samples = [(_labels(series), _sample(series.get("value"))[1]) for series in result]
        elif result_type == "matrix":
            raise SourceError(
                "prometheus query returned a range vector (matrix); use an instant vector "
                "expression, e.g. rate(x[5m]) instead of x[5m]"
            )
        else:
            raise SourceError(f"prometheus query returned unsupported result type {str(result_type)[:20]!r}")
        items = []
        for labels, value in samples:
            if not math.isfinite(value) or abs(value) > MAX_ABS_VALUE:
                if len(warnings) < MAX_WARNINGS:
                    warnings.append(f"series {_describe_labels(labels)}: skipped sample {value:g}")
                continue
            items.append(Item(start=now, end=end, values={"value": value}, labels=labels))
        return FetchResult(items=items, warnings=warnings)

    async def close(self) -> None:
        await self._client.aclose()


def _describe_labels(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))[:200] + "}"
