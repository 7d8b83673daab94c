"""`forecast` source: history (Prometheus range query or an HTTP endpoint) plus a model.

    forecast:
      history:
        prometheus: {url: http://prometheus:9090, query: 'sum by (service) (rate(requests_total[5m]))',
                     step: 5m, length: 14d}
        # or: api: {url: https://history.example/series.csv}   # `timestamp,value` CSV or
        #                                                         # {"history": [[ts, value], ...]}
      model: auto            # seasonalNaive | holtWinters | harmonic | auto
      season: 24h            # optional; auto-detected otherwise
      horizon: 2h
      step: 5m               # output step, default = history step
      quantile: 0.9          # of the prediction interval
      # or, instead of quantile: unservedCost: 20  # choose the quantile per series by backtest:
      #                                             # unserved demand costs 20x idle capacity

fetch(now) reads the history, fits one model per series (in a worker thread: it is CPU work and
the event loop must keep serving) and returns one item per future step,
values {"forecast", "lower", "upper"}, labels = the series' labels.

Durations accept Go syntax ("336h") and, as an extension, days and weeks ("14d", "2w").
"""

from __future__ import annotations

import asyncio
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from adapter.durations import DurationError, parse_duration
from adapter.errors import SourceError, ValidationError
from adapter.fields import expect_mapping, read_duration, read_number, read_string, reject_unknown
from adapter.forecast import MODELS, fit_predict_many
from adapter.forecast.prep import MAX_UNSERVED_COST, MIN_UNSERVED_COST
from adapter.items import MAX_ABS_VALUE, MAX_TIMESTAMP, Item
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
from adapter.sources.jsonbody import decode_text, load_json
from adapter.sources.prometheus import (
    ENDPOINT_FIELDS,
    MAX_POINTS_PER_QUERY,
    PrometheusClient,
    PrometheusEndpoint,
    Series,
    parse_endpoint,
    parse_query,
    query_range,
)
from adapter.tscsv import CsvSeriesError, read_timestamp_value_csv

DEFAULT_HISTORY_STEP = 300.0
DEFAULT_HISTORY_LENGTH = 7 * 86400.0
MAX_HISTORY_LENGTH = 400 * 86400.0
MAX_HISTORY_POINTS = 200_000
MAX_OUTPUT_STEPS = 10_000
MIN_HISTORY_POINTS = 3
MAX_NOTE = 2000


# ---------------------------------------------------------------- durations with days


_LONG_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([dw])(?![a-zµμ])")


def parse_long_duration(value: Any) -> float:
    """Go duration plus `d` (24h) and `w` (7d) units, as Prometheus writes them: "14d", "1d12h"."""
    if isinstance(value, str):
        factor = {"d": 24.0, "w": 168.0}
        text = _LONG_UNIT.sub(lambda m: f"{float(m.group(1)) * factor[m.group(2)]!r}h", value)
        try:
            return parse_duration(text)
        except DurationError:
            raise DurationError(f"invalid duration {value!r}: expected e.g. 30s, 5m, 336h or 14d") from None
    return parse_duration(value)


def read_long_duration(
    obj: Mapping[str, Any], key: str, path: str, default: float | None, minimum: float, maximum: float
) -> float | None:
    if key not in obj or obj[key] is None:
        return default
    return read_duration(obj, key, path, 0.0, minimum, maximum, parser=parse_long_duration)


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class PrometheusHistory:
    endpoint: PrometheusEndpoint
    query: str
    step: float
    length: float


@dataclass(frozen=True)
class ApiHistory:
    http: HttpOptions
    step: float | None  # None: inferred from the timestamps
    length: float | None  # None: use everything the endpoint returns


@dataclass(frozen=True)
class ForecastConfig:
    history: PrometheusHistory | ApiHistory
    model: str
    season: float | None
    horizon: float
    step: float | None  # output step; None = the history step
    quantile: float
    regressors: tuple[Any, ...] = ()  # adapter.sources.forecast_regressors.RegressorConfig
    unserved_cost: float | None = None  # set: the quantile is chosen per series by backtest cost


def parse_forecast_config(spec: Mapping[str, Any], path: str) -> ForecastConfig:
    reject_unknown(
        spec, ("history", "model", "season", "horizon", "step", "quantile", "unservedCost", "regressors"), path
    )
    if "history" not in spec:
        raise ValidationError(f"{path}.history", "required: {prometheus: {...}} or {api: {...}}")
    history = _parse_history(spec["history"], f"{path}.history")
    model = read_string(spec, "model", path, default="auto", choices=tuple(MODELS)) or "auto"
    season = read_long_duration(spec, "season", path, None, minimum=1.0, maximum=366 * 86400.0)
    horizon = read_long_duration(spec, "horizon", path, 7200.0, minimum=1.0, maximum=31 * 86400.0)
    step = read_long_duration(spec, "step", path, None, minimum=1.0, maximum=7 * 86400.0)
    quantile = read_number(spec, "quantile", path, default=0.9)
    assert horizon is not None and quantile is not None
    if not 0.5 < quantile < 1.0:
        raise ValidationError(f"{path}.quantile", f"{quantile:g} must be between 0.5 and 1 (e.g. 0.9)")
    unserved_cost = read_number(spec, "unservedCost", path, default=None)
    if unserved_cost is not None:
        if spec.get("quantile") is not None:
            raise ValidationError(
                f"{path}.unservedCost",
                "give either quantile (fixed) or unservedCost (the quantile is then chosen by backtest), not both",
            )
        if not MIN_UNSERVED_COST <= unserved_cost <= MAX_UNSERVED_COST:
            raise ValidationError(
                f"{path}.unservedCost",
                f"{unserved_cost:g} must be between {MIN_UNSERVED_COST:g} and {MAX_UNSERVED_COST:g}: how many "
                "units of idle capacity one unit of unserved demand costs (e.g. 10)",
            )
    history_step = history.step
    if step is not None and history_step is not None and step < history_step:
        raise ValidationError(f"{path}.step", f"must not be shorter than the history step ({history_step:g}s)")
    effective_step = step or history_step
    if effective_step is not None and horizon / effective_step > MAX_OUTPUT_STEPS:
        raise ValidationError(f"{path}.horizon", f"more than {MAX_OUTPUT_STEPS} steps of {effective_step:g}s")
    if isinstance(history, PrometheusHistory) and history.length / history.step > MAX_HISTORY_POINTS:
        raise ValidationError(
            f"{path}.history.prometheus.length", f"more than {MAX_HISTORY_POINTS} points at step {history.step:g}s"
        )
    regressors: tuple[Any, ...] = ()
    if spec.get("regressors") is not None:
        from adapter.sources.forecast_regressors import parse_regressors

        regressors = parse_regressors(spec["regressors"], f"{path}.regressors", _parse_history)
    return ForecastConfig(
        history=history,
        model=model,
        season=season,
        horizon=horizon,
        step=step,
        quantile=quantile,
        regressors=regressors,
        unserved_cost=unserved_cost,
    )


def _parse_history(raw: Any, path: str) -> PrometheusHistory | ApiHistory:
    history = expect_mapping(raw, path)
    reject_unknown(history, ("prometheus", "api"), path)
    if len(history) != 1:
        raise ValidationError(path, "exactly one of prometheus or api is required")
    if "prometheus" in history:
        where = f"{path}.prometheus"
        block = expect_mapping(history["prometheus"], where)
        reject_unknown(block, ENDPOINT_FIELDS + ("query", "step", "length"), where)
        step = read_long_duration(block, "step", where, DEFAULT_HISTORY_STEP, minimum=1.0, maximum=86400.0)
        length = read_long_duration(
            block, "length", where, DEFAULT_HISTORY_LENGTH, minimum=60.0, maximum=MAX_HISTORY_LENGTH
        )
        assert step is not None and length is not None
        if length < MIN_HISTORY_POINTS * step:
            raise ValidationError(f"{where}.length", f"must cover at least {MIN_HISTORY_POINTS} steps")
        return PrometheusHistory(
            endpoint=parse_endpoint(block, where), query=parse_query(block, where), step=step, length=length
        )
    where = f"{path}.api"
    block = expect_mapping(history["api"], where)
    reject_unknown(block, HTTP_OPTION_FIELDS + ("step", "length"), where)
    return ApiHistory(
        http=parse_http_options(block, where),
        step=read_long_duration(block, "step", where, None, minimum=1.0, maximum=86400.0),
        length=read_long_duration(block, "length", where, None, minimum=60.0, maximum=MAX_HISTORY_LENGTH),
    )


# ---------------------------------------------------------------- history documents


def _history_response(response: HttpResponse) -> Series:
    response.check_ok()
    return parse_history_document(response.body, response.url)


def parse_history_document(body: bytes, where: str) -> Series:
    """`timestamp,value` CSV, or JSON {"history": [[ts, value], ...], "labels": {...}?}."""
    text = body.lstrip()
    if text[:1] in (b"{", b"["):
        document = load_json(body, where)
        if not isinstance(document, dict) or not isinstance(document.get("history"), list):
            raise SourceError(f'{where}: expected JSON {{"history": [[timestamp, value], ...]}}')
        labels = document.get("labels") or {}
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise SourceError(f'{where}: "labels" must be a map of strings')
        # JSON null is a gap (NaN), as many exporters write missing points.
        rows = [
            [math.nan if x is None else x for x in row] if isinstance(row, list) else row for row in document["history"]
        ]
        try:
            if any(isinstance(x, (bool, str)) for row in rows if isinstance(row, list) for x in row):
                raise ValueError
            pairs = np.array(rows, dtype=float)
        except (TypeError, ValueError):
            raise SourceError(f'{where}: "history" must be a list of [timestamp, value] number pairs') from None
        if pairs.size == 0:
            pairs = pairs.reshape(0, 2)
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise SourceError(f'{where}: "history" must be a list of [timestamp, value] pairs')
        # As in CSV: a gap is null (or NaN), an infinite value or timestamp is an error, not a gap.
        infinite = np.flatnonzero(np.isinf(pairs).any(axis=1))
        if infinite.size:
            row = int(infinite[0])
            column = 0 if np.isinf(pairs[row, 0]) else 1
            shown = "Infinity" if pairs[row, column] > 0 else "-Infinity"
            more = f" (and {infinite.size - 1} more such rows)" if infinite.size > 1 else ""
            raise SourceError(f"{where}: history[{row}]: {('timestamp', 'value')[column]} {shown} is not finite{more}")
        return dict(labels), pairs[:, 0], pairs[:, 1]
    return {}, *_parse_csv(body, where)


def _parse_csv(body: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        series = read_timestamp_value_csv(decode_text(body, where))
    except CsvSeriesError as exc:
        raise SourceError(f"{where}: history is not JSON or `timestamp,value` CSV: {exc}") from None
    return series.timestamps, series.values


def regularize(
    timestamps: np.ndarray, values: np.ndarray, step: float, since: float | None
) -> tuple[float, np.ndarray]:
    """Values on an equally spaced grid ending at the newest timestamp (NaN where nothing fell).

    Samples are binned to the nearest grid point and averaged, which both aligns irregular data and
    aggregates a fine history onto a coarser output step. Returns (last grid time, values).
    """
    keep = np.isfinite(timestamps)
    if since is not None:
        keep &= timestamps >= since
    timestamps, values = timestamps[keep], values[keep]
    if timestamps.size == 0:
        raise ValueError("no history points")
    if timestamps.max() > MAX_TIMESTAMP:
        raise ValueError("timestamps are beyond year 2200: milliseconds instead of seconds?")
    last = float(timestamps.max())
    index = np.rint((last - timestamps) / step).astype(np.int64)
    size = int(index.max()) + 1
    if size > MAX_HISTORY_POINTS:
        raise ValueError(f"history spans {size} steps of {step:g}s, more than {MAX_HISTORY_POINTS}")
    finite = np.isfinite(values)
    sums = np.bincount(index[finite], weights=values[finite], minlength=size)
    counts = np.bincount(index[finite], minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        grid = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return last, grid[::-1].copy()  # index 0 was the newest point


def infer_step(timestamps: np.ndarray) -> float:
    diffs = np.diff(np.unique(timestamps[np.isfinite(timestamps)]))
    if diffs.size == 0:
        raise SourceError("history has fewer than 2 distinct timestamps; cannot infer its step")
    return float(np.median(diffs))


# ---------------------------------------------------------------- the source


class ForecastSource(Source[ForecastConfig]):
    kind = "forecast"
    default_interval = 300.0  # a refit every 5 minutes

    @classmethod
    def value_names(cls, config: ForecastConfig) -> frozenset[str]:
        """Every forecast item carries exactly these values; expressions are checked against them."""
        extra = {"baseline", "events"} if config.regressors else set()
        return frozenset({"forecast", "lower", "upper"} | extra)

    def __init__(self, config: ForecastConfig, common: CommonSourceSettings, context: SourceContext):
        super().__init__(config, common, context)
        history = config.history
        if isinstance(history, PrometheusHistory):
            self._prometheus: PrometheusClient | None = PrometheusClient(history.endpoint, context, common.timeout)
            self._http: HttpClient | None = None
        else:
            self._prometheus = None
            allow = history.http.allow_link_local or context.allow_private_networks
            self._http = HttpClient(history.http.tls, allow_link_local=allow)
        # Fitted effect of each announced regressor, per series (for the VirtualMetricEvent status).
        self.last_effects: list[dict[str, Any]] = []
        self._regressors: Any = None
        self._regressor_data: Any = None
        if config.regressors:
            from adapter.sources.forecast_regressors import RegressorReader

            self._regressors = RegressorReader(
                config.regressors,
                lambda h: ForecastSource(ForecastConfig(h, "auto", None, 3600.0, None, 0.9), common, context),
                common,
                context,
            )

    def fetch_deadline(self) -> float:
        """Seconds a whole fetch may take: the HTTP timeout covers only the download, the fit
        needs its own budget (about 0.2 s per series for 14 days at 5m on one core, less batched)."""
        history = self.config.history
        requests = 1
        if isinstance(history, PrometheusHistory):
            requests = math.ceil(history.length / history.step / MAX_POINTS_PER_QUERY)
        return self.common.timeout * requests + max(60.0, min(self.common.interval, 600.0))

    @classmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> ForecastConfig:
        return parse_forecast_config(spec, path)

    def describe(self) -> str:
        history = self.config.history
        where = (
            f"api {safe_url(history.http.url)}"
            if isinstance(history, ApiHistory)
            else f"prometheus {safe_url(history.endpoint.http.url)}"
        )
        return f"forecast {self.config.model} from {where}"

    async def _history(self, now: float) -> tuple[list[Series], float]:
        """All series of history and their step in seconds."""
        history = self.config.history
        if isinstance(history, PrometheusHistory):
            assert self._prometheus is not None
            # Align the grid to multiples of the step so item boundaries stay put from one refit to
            # the next (and match how Prometheus recording rules are usually evaluated).
            end = math.floor(now / history.step) * history.step
            series = await query_range(self._prometheus, history.query, end - history.length, end, history.step)
            return series, history.step
        assert self._http is not None
        labels, timestamps, values = await get_document(
            self._http, history.http, self.context, timeout=self.common.timeout, parse=_history_response
        )
        if history.length is not None:
            keep = timestamps >= now - history.length
            timestamps, values = timestamps[keep], values[keep]
        step = history.step or infer_step(timestamps)
        return [(labels, timestamps, values)], step

    async def fetch(self, now: float) -> FetchResult:
        series, history_step = await self._history(now)
        if self._regressors is not None:
            self._regressor_data = await self._regressors.fetch(now)
        if not series:
            raise SourceError("history query returned no series")
        step = self.config.step or history_step
        # The fit is CPU work (backtests over weeks of points): keep the event loop free.
        items, notes, warnings = await asyncio.to_thread(self._forecast_all, fit_predict_many, series, step, now)
        if not items and warnings:
            raise SourceError(f"no series could be forecast: {warnings[0]}")
        return FetchResult(items=items, warnings=warnings[:MAX_WARNINGS], note="; ".join(notes)[:MAX_NOTE])

    def _forecast_all(
        self, fit_many: Any, series: list[Series], step: float, now: float
    ) -> tuple[list[Item], list[str], list[str]]:
        config: ForecastConfig = self.config
        horizon_steps = max(1, math.ceil(config.horizon / step - 1e-9))
        warnings: list[str] = []
        # Series sharing a grid (same end and length: the usual case for one range query) are fitted
        # together with the vectorised fit_predict_many, several times faster than one by one.
        groups: dict[tuple[float, int], list[tuple[dict[str, str], np.ndarray]]] = {}
        for labels, timestamps, values in series:
            if infinite := int(np.count_nonzero(np.isinf(values))):
                # Prometheus answers x/0 with +Inf: a load no forecast can follow, so it is read as a
                # gap (like NaN, Prometheus' own "no value"), but never silently: it is a query bug.
                warnings.append(
                    f"series {_describe_labels(labels)}: {infinite} of {values.size} history samples are "
                    "infinite (a division by zero in the query?); read as gaps"
                )
            try:
                last, grid = regularize(timestamps, values, step, None)
                observed = int(np.count_nonzero(np.isfinite(grid)))
                if observed < MIN_HISTORY_POINTS:
                    raise ValueError(f"only {observed} history points (need {MIN_HISTORY_POINTS})")
                if (now - last) / step + horizon_steps > MAX_OUTPUT_STEPS:
                    raise ValueError(f"history ends {now - last:.0f}s before now; too old to forecast from")
            except ValueError as exc:
                warnings.append(f"series {_describe_labels(labels)}: {exc}")
                continue
            groups.setdefault((last, grid.size), []).append((labels, grid))
        items: list[Item] = []
        notes: list[str] = []
        effects: list[dict[str, Any]] = []
        for (last, _size), members in groups.items():
            # History that ends before now (scrape gap, late data) is bridged: forecast far enough
            # to still cover [now, now + horizon].
            total = max(0, math.floor((now - last) / step)) + horizon_steps
            if self._regressor_data is not None:
                fitted = self._fit_fused(members, last, step, total, warnings)
                effects.extend(
                    {"series": _describe_labels(labels), "regressors": r.effects.as_dict()} for labels, r in fitted
                )
            else:
                fitted = self._fit_group(fit_many, members, step, total, warnings)
            for labels, result in fitted:
                items.extend(_items_for(labels, last, step, now, result, warnings))
                season = f", season {result.season:g}s" if result.season else ""
                note = f": {result.note}" if result.note else ""
                notes.append(f"{_describe_labels(labels)} {result.model}{season}{note}")
        self.last_effects = effects
        return items, notes, warnings

    def _fit_fused(
        self,
        members: list[tuple[dict[str, str], np.ndarray]],
        last: float,
        step: float,
        total: int,
        warnings: list[str],
    ) -> list[tuple[dict[str, str], Any]]:
        """One series at a time with the announced regressors (adapter.forecast.regressors)."""
        from adapter.forecast.regressors import fit_predict_fused

        data = self._regressor_data
        config: ForecastConfig = self.config
        out = []
        for labels, grid in members:
            try:
                result = fit_predict_fused(
                    grid,
                    step,
                    total,
                    data.on_grid(last, step, grid.size),
                    data.ahead(last, step, total),
                    data.names,
                    model=config.model,
                    season=config.season,
                    quantile=config.quantile,
                    unserved_cost=config.unserved_cost,
                )
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
                warnings.append(f"series {_describe_labels(labels)}: {exc}")
                continue
            out.append((labels, result))
        return out

    def _fit_group(
        self,
        fit_many: Any,
        members: list[tuple[dict[str, str], np.ndarray]],
        step: float,
        total: int,
        warnings: list[str],
    ) -> list[tuple[dict[str, str], Any]]:
        config: ForecastConfig = self.config
        options = {
            "model": config.model,
            "season": config.season,
            "quantile": config.quantile,
            "unserved_cost": config.unserved_cost,
        }
        try:
            results = fit_many(np.stack([grid for _, grid in members]), step, total, **options)
            return [(labels, result) for (labels, _), result in zip(members, results, strict=True)]
        except (ValueError, FloatingPointError):
            if len(members) == 1:
                warnings.append(f"series {_describe_labels(members[0][0])}: {sys.exc_info()[1]}")
                return []
        # One bad series must not sink the batch: fit one by one to find and report it.
        out = []
        for member in members:
            out.extend(self._fit_group(fit_many, [member], step, total, warnings))
        return out

    async def close(self) -> None:
        if self._prometheus is not None:
            await self._prometheus.aclose()
        if self._http is not None:
            await self._http.aclose()
        if self._regressors is not None:
            await self._regressors.close()


def _items_for(
    labels: Mapping[str, str],
    last: float,
    step: float,
    now: float,
    result: Any,
    warnings: list[str] | None = None,
) -> list[Item]:
    """The items of one fitted series from now on. Steps whose forecast or bounds are not finite
    or beyond ±MAX_ABS_VALUE are left out; with `warnings`, how many is said there (a fetch that
    served nothing must not look like a healthy one)."""
    forecast = np.asarray(result.forecast, dtype=float)
    lower = np.asarray(result.lower, dtype=float)
    upper = np.asarray(result.upper, dtype=float)
    starts = last + step * np.arange(1, forecast.size + 1)
    ahead = starts + step > now
    with np.errstate(invalid="ignore"):
        usable = (
            (np.abs(forecast) <= MAX_ABS_VALUE) & (np.abs(lower) <= MAX_ABS_VALUE) & (np.abs(upper) <= MAX_ABS_VALUE)
        )  # NaN compares false: not finite is not usable either
    keep = ahead & usable
    dropped = int(np.count_nonzero(ahead)) - int(np.count_nonzero(keep))
    if dropped and warnings is not None:
        warnings.append(
            f"series {_describe_labels(labels)}: {dropped} of {int(np.count_nonzero(ahead))} forecast steps "
            f"left out: the forecast or its bounds are not finite or beyond ±{MAX_ABS_VALUE:g}"
        )
    items = []
    baseline = getattr(result, "baseline", None)  # a fused forecast: the events' effect apart
    for k in np.flatnonzero(keep):
        start = float(starts[k])
        values = {"forecast": float(forecast[k]), "lower": float(lower[k]), "upper": float(upper[k])}
        if baseline is not None:
            values.update(baseline=float(baseline[k]), events=float(forecast[k] - baseline[k]))
        items.append(Item(start=start, end=start + step, values=values, labels=dict(labels)))
    if items and items[0].start > now:
        # The first forecast step begins up to one step after now; let it cover the gap so there is
        # never a moment without a forecast.
        first = items[0]
        items[0] = Item(start=now, end=first.end, values=first.values, labels=first.labels)
    return items


# The simulator builds its forecast items with the same rules.
forecast_items = _items_for


def _describe_labels(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))[:200] + "}"
