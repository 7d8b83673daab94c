"""The two CustomResourceDefinitions of prescaler.pingpong.ai/v1, described once in Python.

The schemas mirror the validation in `adapter/resources.py` and the source kinds. The blocks that
repeat (durations, secret references, TLS, headers, auth) are written once here. Two users:
`deploy/crds/generate.py` renders them to the YAML that kubectl, kustomize and Helm install, and
`prescaler validate` checks manifests against them offline (so an installed prescaler needs no YAML
files to validate). `tests/deploy/test_manifests_crds.py` fails when the committed YAML and this module disagree.
"""

from __future__ import annotations

from typing import Any

from adapter.forecast.prep import MAX_UNSERVED_COST, MIN_UNSERVED_COST
from adapter.sources.registry import KINDS  # the one list of source kinds

GROUP = "prescaler.pingpong.ai"
VERSION = "v1"

Schema = dict[str, Any]

# ------------------------------------------------------------------ patterns shared with the code
# adapter/resources.py: a metric name is a URL path segment.
METRIC_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.:|]{0,251}[A-Za-z0-9_])?$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# adapter/durations.py accepts Go's time.ParseDuration grammar or a bare number of seconds.
# Negative durations are rejected by the code for every field, so the pattern has no sign.
DURATION = r"^(0|[0-9]+(\.[0-9]+)?|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"
# adapter/sources/forecast.py parse_long_duration: Prometheus-style d (24h) and w (7d) units too.
LONG_DURATION = r"^(0|[0-9]+(\.[0-9]+)?|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h|d|w))+)$"
HTTP_TOKEN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
HEADER_VALUE = r"^[^\r\n\x00]*$"
# http/https with a host and no user:password@ (credentials in URLs end up in logs).
URL = r"^https?://[^\s/?#@]+([/?#][^\s]*)?$"
NOT_BLANK = r"\S"
DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
TIME_OF_DAY = r"^[0-9]{1,2}:[0-5][0-9](:[0-5][0-9])?$"
_DAY = "mon|monday|tue|tues|tuesday|wed|wednesday|thu|thur|thurs|thursday|fri|friday|sat|saturday|sun|sunday"
WEEK_DAY = rf"^\s*(?i:{_DAY})(-(?i:{_DAY}))?\s*$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
# adapter/resources.py read_number: finite numbers within ±1e15.
NUMBER_LIMIT = 10**15


# ------------------------------------------------------------------ small schema builders


def obj(
    description: str,
    properties: dict[str, Schema],
    required: list[str] | None = None,
    rules: list[tuple[str, str]] | None = None,
) -> Schema:
    """A closed object: unknown fields are pruned/rejected, like the strict parser in the code."""
    schema: Schema = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = required
    if rules:
        schema["x-kubernetes-validations"] = [{"rule": rule, "message": message} for rule, message in rules]
    return schema


def string(
    description: str,
    pattern: str | None = None,
    max_length: int = 4096,
    min_length: int | None = None,
    enum: list[str] | None = None,
) -> Schema:
    schema: Schema = {"type": "string", "description": description}
    if enum:
        schema["enum"] = enum
    else:
        schema["maxLength"] = max_length
    if min_length is not None:
        schema["minLength"] = min_length
    if pattern:
        schema["pattern"] = pattern
    return schema


def number(description: str, minimum: float = -NUMBER_LIMIT, maximum: float = NUMBER_LIMIT) -> Schema:
    return {"type": "number", "description": description, "minimum": minimum, "maximum": maximum}


def integer(description: str, minimum: int | None = None, maximum: int | None = None, fmt: str | None = None) -> Schema:
    schema: Schema = {"type": "integer", "description": description}
    if fmt:
        schema["format"] = fmt
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def boolean(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def duration(description: str, minimum: int = 0, long: bool = False) -> Schema:
    # int-or-string: `30s`, `5m`, `1h30m` or a whole number of seconds (YAML authors write `interval: 30`).
    # Fractional seconds go in a string ("2.5s"): Kubernetes has no number-or-string type.
    units = "30s, 5m, 1h30m, 14d or 2w" if long else "30s, 5m or 1h30m"
    return {
        "x-kubernetes-int-or-string": True,
        "description": f"{description} A duration such as {units}, or a whole number of seconds.",
        "pattern": LONG_DURATION if long else DURATION,
        "minimum": minimum,
    }


def array(description: str, items: Schema, max_items: int, min_items: int | None = None) -> Schema:
    schema: Schema = {"type": "array", "description": description, "items": items, "maxItems": max_items}
    if min_items is not None:
        schema["minItems"] = min_items
    return schema


def number_map(description: str) -> Schema:
    return {
        "type": "object",
        "description": description,
        "maxProperties": 64,
        "additionalProperties": {"type": "number"},
    }


# ------------------------------------------------------------------ shared blocks


def secret_key_ref() -> Schema:
    return obj(
        "A key of a Secret. prescaler reads it with its own ServiceAccount, so it needs RBAC on "
        "that Secret (see the RBAC notes).",
        {
            "namespace": string(
                "Namespace of the Secret (VirtualMetricEvents are cluster-scoped, so it is always needed).",
                DNS1123_LABEL,
                63,
            ),
            "name": string("Name of the Secret.", DNS1123_SUBDOMAIN, 253),
            "key": string("Key inside the Secret's data.", SECRET_KEY, 253),
        },
        required=["namespace", "name", "key"],
    )


def secret_ref_holder(description: str) -> Schema:
    return obj(description, {"secretKeyRef": secret_key_ref()}, required=["secretKeyRef"])


def headers() -> Schema:
    header = obj(
        "One HTTP request header, with its value written inline or read from a Secret.",
        {
            "name": string(
                "Header name, e.g. Authorization (not Host, Content-Length, Transfer-Encoding or Connection).",
                HTTP_TOKEN,
                256,
            ),
            "value": string("Literal header value (one line).", HEADER_VALUE, 8192),
            "valueFrom": secret_ref_holder("Read the header value from a Secret key."),
        },
        required=["name"],
        rules=[("has(self.value) != has(self.valueFrom)", "exactly one of value or valueFrom is required")],
    )
    return array("HTTP headers sent with every request.", header, max_items=32)


INSECURE_ALONE = (
    "!(has(self.insecureSkipVerify) && self.insecureSkipVerify && (has(self.caBundle) || has(self.caFile)))"
)


def tls() -> Schema:
    return obj(
        "TLS settings for an https URL.",
        {
            "caBundle": string(
                "PEM CA certificates that verify the server (instead of the system roots).",
                "-----BEGIN CERTIFICATE-----",
                1024 * 1024,
            ),
            "caFile": string("Path of a PEM CA file inside the prescaler container.", max_length=4096),
            "insecureSkipVerify": boolean(
                "Skip server certificate verification (testing only; not with caBundle or caFile)."
            ),
        },
        rules=[(INSECURE_ALONE, "insecureSkipVerify cannot be combined with caBundle or caFile")],
    )


def auth() -> Schema:
    return obj(
        "Authentication for the Prometheus HTTP API.",
        {
            "bearerToken": secret_ref_holder("Send `Authorization: Bearer <token>` with the token from a Secret."),
            "bearerTokenFile": string(
                "Path of a file holding the bearer token (e.g. a projected ServiceAccount token).", max_length=4096
            ),
            "basic": obj(
                "HTTP basic authentication.",
                {
                    "username": string("User name (no ':').", r"^[^:]*$", 256),
                    "password": secret_ref_holder("Password from a Secret."),
                    "passwordFile": string("Path of a file holding the password.", max_length=4096),
                },
                required=["username"],
                rules=[
                    (
                        "has(self.password) != has(self.passwordFile)",
                        "exactly one of password or passwordFile is required",
                    )
                ],
            ),
        },
        rules=[
            (
                "[has(self.bearerToken), has(self.bearerTokenFile), has(self.basic)].filter(x, x).size() == 1",
                "exactly one of bearerToken, bearerTokenFile or basic is required",
            )
        ],
    )


def url(description: str) -> Schema:
    return string(description, URL, 2048)


def max_response_bytes() -> Schema:
    return integer(
        "Largest response body accepted, in bytes (1024 to 256Mi); larger responses fail the fetch.",
        minimum=1024,
        maximum=256 << 20,
        fmt="int64",
    )


def allow_link_local() -> Schema:
    return boolean(
        "Allow link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10), which are refused by default."
    )


def common_source_fields() -> dict[str, Schema]:
    """interval/timeout/staleAfter/onStale: beside the kind in spec.source, or inside its block."""
    return {
        "interval": duration("How often the source is fetched (default 30s for remote sources).", minimum=1),
        "timeout": duration("Timeout of one fetch (default 5s, at most 300s).", minimum=1),
        "staleAfter": duration(
            "After this long without a successful fetch the source is stale (default 5 x interval, at least interval)."
        ),
        "onStale": string(
            "What a stale source does: Hold answers value queries with 503 so the HPA keeps "
            "its replicas; UseKnown keeps serving the items already fetched.",
            enum=["Hold", "UseKnown"],
        ),
    }


# ------------------------------------------------------------------ source kinds


def api_source() -> Schema:
    return obj(
        'Poll an HTTP(S) endpoint returning {"items": [{"start", "end", "values"}]} (unix seconds).',
        {
            "url": url("URL fetched with GET."),
            "headers": headers(),
            "maxResponseBytes": max_response_bytes(),
            "tls": tls(),
            "allowLinkLocal": allow_link_local(),
            **common_source_fields(),
        },
        required=["url"],
    )


def schedule_item() -> Schema:
    when = {"x-kubernetes-int-or-string": True, "maxLength": 64, "minimum": 0}
    return obj(
        "One known window.",
        {
            "start": {
                **when,
                "description": "Start: unix seconds or an RFC 3339 time (without an offset: in the "
                "schedule's time zone).",
            },
            "end": {**when, "description": "End (exclusive): unix seconds or an RFC 3339 time."},
            "values": number_map("Named values, e.g. {scheduledMessage: 50}."),
            "id": string("Identifier; items with the same id count once.", max_length=256),
        },
        required=["start", "end"],
    )


def time_of_day(description: str) -> Schema:
    # A string "HH:MM"; YAML 1.1 readers (PyYAML) turn an unquoted 20:00 into the integer 1200
    # (sexagesimal minutes), which the code accepts too.
    return {
        "x-kubernetes-int-or-string": True,
        "description": description,
        "pattern": TIME_OF_DAY,
        "maxLength": 8,
        "minimum": 0,
        "maximum": 1439,
    }


def dates(description: str) -> Schema:
    return array(description, string("A date, YYYY-MM-DD.", DATE, 10), max_items=1000)


def schedule_window() -> Schema:
    return obj(
        "A recurring window: either cron + duration, or a daily/weekly time range (days, start, end).",
        {
            "cron": string("5-field cron expression for the window starts, e.g. '0 9 * * 1-5'.", max_length=256),
            "duration": duration("Length of each window started by cron (with cron only).", minimum=1),
            "days": array(
                "Week days on which the time range applies (default: every day): names "
                "such as Mon or Monday, or ranges such as Mon-Fri.",
                string("A week day or a range of days.", WEEK_DAY, 24),
                max_items=14,
                min_items=1,
            ),
            "start": time_of_day("Start time of day, HH:MM."),
            "end": time_of_day("End time of day, HH:MM; at or before start means the next day; 24:00 is midnight."),
            "values": number_map("Named values during the window."),
            "timeZone": string("IANA time zone of this window (default: the schedule's).", max_length=128),
            "exclude": dates("Dates (in the window's time zone) on which it does not occur."),
        },
        required=["values"],
        rules=[
            (
                "!(has(self.cron) && (has(self.days) || has(self.start) || has(self.end)))",
                "give either cron + duration or days/start/end, not both",
            ),
            ("has(self.cron) == has(self.duration)", "duration is required with cron and only allowed with cron"),
            ("has(self.cron) || (has(self.start) && has(self.end))", "a window without cron needs start and end"),
        ],
    )


def schedule_source() -> Schema:
    return obj(
        "Items written inline and recurring windows, like a calendar of known campaigns.",
        {
            "timeZone": string("IANA time zone for windows, e.g. Asia/Seoul (default UTC).", max_length=128),
            "items": array("One-off windows.", schedule_item(), max_items=10000),
            "windows": array("Recurring windows.", schedule_window(), max_items=1000),
            "exclude": dates("Dates on which no recurring window occurs (e.g. holidays)."),
            "lookahead": duration(
                "How far ahead recurring windows are expanded (default 48h, 60s to 744h).", minimum=60
            ),
            **common_source_fields(),
        },
        rules=[
            (
                "(has(self.items) && size(self.items) > 0) || (has(self.windows) && size(self.windows) > 0)",
                "at least one of items or windows is required",
            )
        ],
    )


def prometheus_source() -> Schema:
    return obj(
        "A PromQL instant query; its current value becomes an item covering [now, now + interval).",
        {
            "url": url("Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090."),
            "query": string("PromQL expression.", NOT_BLANK, 65536),
            "headers": headers(),
            "auth": auth(),
            "tls": tls(),
            "maxResponseBytes": max_response_bytes(),
            "allowLinkLocal": allow_link_local(),
            **common_source_fields(),
        },
        required=["url", "query"],
    )


def forecast_source() -> Schema:
    prom_history = obj(
        "A Prometheus range query giving the history.",
        {
            "url": url("Base URL of the Prometheus HTTP API."),
            "query": string("PromQL expression.", NOT_BLANK, 65536),
            "step": duration("Resolution of the history (default 5m, at most 1d).", minimum=1, long=True),
            "length": duration("How much history to load, e.g. 14d.", minimum=60, long=True),
            "headers": headers(),
            "auth": auth(),
            "tls": tls(),
            "maxResponseBytes": max_response_bytes(),
            "allowLinkLocal": allow_link_local(),
        },
        required=["url", "query"],
    )
    api_history = obj(
        "An HTTP(S) endpoint returning past items in the api source format.",
        {
            "url": url("URL fetched with GET."),
            "headers": headers(),
            "tls": tls(),
            "maxResponseBytes": max_response_bytes(),
            "allowLinkLocal": allow_link_local(),
            "step": duration("Resolution the history is resampled to (at most 1d).", minimum=1, long=True),
            "length": duration("How much history to use.", minimum=60, long=True),
        },
        required=["url"],
    )

    def history(description: str) -> Schema:
        return obj(
            description,
            {"prometheus": prom_history, "api": api_history},
            rules=[("has(self.prometheus) != has(self.api)", "exactly one of prometheus or api is required")],
        )

    regressor = obj(
        "An announced series whose effect per unit on the load is fitted from history.",
        {
            "name": string("Name shown in status and notes.", r"^[A-Za-z_][A-Za-z0-9_]{0,62}$", 63),
            "value": string("The item value to read (default: name).", max_length=253),
            "history": history("The announced values of the past (e.g. prescaler_announced_value): prometheus or api."),
            # The api/schedule blocks are checked by prescaler (errors name the field): embedding their full
            # schemas again would double the CRD and multiply its CEL cost estimate by the list sizes.
            "future": obj(
                "What is announced ahead: exactly one of api or schedule (the same fields as those source kinds).",
                {
                    "api": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "description": "An api source's fields (url, headers, tls, ...).",
                    },
                    "schedule": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "description": "A schedule source's fields (items, recurring, timeZone).",
                    },
                },
                rules=[("has(self.api) != has(self.schedule)", "exactly one of api or schedule is required")],
            ),
        },
        required=["name", "history", "future"],
    )
    return obj(
        "Forecast future items from history with a numpy model.",
        {
            "history": history("Where the history comes from: exactly one of prometheus or api."),
            "regressors": array(
                "Announced series fused into the forecast (items then also carry baseline and events).",
                regressor,
                max_items=8,
                min_items=1,
            ),
            "model": string(
                "seasonalNaive, holtWinters, harmonic (FFT), lastValue or auto (chosen by backtest; the default).",
                enum=["seasonalNaive", "holtWinters", "harmonic", "auto", "lastValue"],
            ),
            "season": duration("Season length, e.g. 1d or 1w (default: detected).", minimum=1, long=True),
            "horizon": duration("How far ahead to forecast (default 2h, at most 31d).", minimum=1, long=True),
            "step": duration(
                "Length of each forecast item (default: the history step; not shorter).", minimum=1, long=True
            ),
            "quantile": {
                **number("Quantile of the prediction interval served as `upper`, in (0.5, 1); default 0.9.", 0.5, 1),
                "exclusiveMinimum": True,
                "exclusiveMaximum": True,
            },
            "unservedCost": number(
                "Instead of quantile: choose the quantile of `upper` per series at every refit, the one "
                "(of 0.7, 0.8, 0.9, 0.95, 0.98) with the lowest backtest cost when one unit of demand "
                "above `upper` costs this many units of capacity above demand, e.g. 10.",
                MIN_UNSERVED_COST,
                MAX_UNSERVED_COST,
            ),
            **common_source_fields(),
        },
        required=["history"],
        rules=[
            (
                "!(has(self.quantile) && has(self.unservedCost))",
                "give either quantile or unservedCost, not both",
            )
        ],
    )


# ------------------------------------------------------------------ the two resources


def condition() -> Schema:
    """metav1.Condition, as controller-gen emits it."""
    return obj(
        "A metav1.Condition.",
        {
            "type": string(
                "Condition type, e.g. Ready, SourceHealthy, ExpressionsValid.",
                r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                316,
            ),
            "status": string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": string("CamelCase reason.", r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", 1024, 1),
            "message": string("Human-readable detail.", max_length=32768),
            "lastTransitionTime": {
                "type": "string",
                "format": "date-time",
                "description": "When the status last changed.",
            },
            "observedGeneration": integer("metadata.generation the condition was set for.", 0, fmt="int64"),
        },
        required=["type", "status", "lastTransitionTime", "reason", "message"],
    )


def virtual_metric_schema() -> Schema:
    spec = obj(
        "The external metric served to HPAs and how contributions combine.",
        {
            "name": string(
                "External metric name served (the HPA's metric.name); defaults to metadata.name. "
                "A URL path segment: letters, digits, '-', '_', '.', ':'.",
                METRIC_NAME,
                253,
            ),
            "defaultValue": number("Value served for a known target when no event or forecast contributes."),
            "mergeStrategy": {
                **string(
                    "How concurrent contributions for one target combine: Sum, Max, Min or Average.",
                    enum=["Sum", "Max", "Min", "Average"],
                ),
                "default": "Sum",
            },
            "leadTime": {
                **duration(
                    "Look this far ahead and serve the peak: pods must be ready when traffic arrives "
                    "(at most 7 days). Auto: learnt from the scale target's pod start-up, the HPA "
                    "sync period and its scale-up ramp."
                ),
                "pattern": "^(Auto|" + DURATION[2:-2] + ")$",
            },
            "holdTime": duration("Keep a window's value this long after it ends (at most 7 days)."),
            "min": number("Lower clamp of the served value."),
            "max": number("Upper clamp of the served value."),
            "stepPastTolerance": obj(
                "When a target's value needs more replicas than it has but the HPA would ignore it "
                "(usage ratio within its tolerance of 1), serve the smallest value just past the band "
                "so the HPA scales up. Needs the HPA that reads the target (cluster mode reads it, "
                "read-only); unknown: the value is served unchanged.",
                {
                    "scaleUp": boolean("Step a needed scale-up past the band (default true when the block is set)."),
                    "tolerance": {
                        **number(
                            "The controller's --horizontal-pod-autoscaler-tolerance that prescaler assumes "
                            "(default 0.1); an HPA's own behavior.scaleUp.tolerance is used instead when set.",
                            0,
                            1,
                        ),
                        "exclusiveMaximum": True,
                    },
                },
            ),
        },
        rules=[("!has(self.min) || !has(self.max) || self.min <= self.max", "min must not be greater than max")],
    )
    status = obj(
        "Observed state, written by prescaler.",
        {
            "observedGeneration": integer("metadata.generation last processed.", 0, fmt="int64"),
            "metricName": string(
                "The external metric name actually served: spec.name, or metadata.name when "
                "spec.name is not set (printer columns cannot show a defaulted field).",
                METRIC_NAME,
                253,
            ),
            "targets": integer(
                "Number of target resources (namespace/name) this metric currently serves.", 0, fmt="int64"
            ),
            "unknownTargets": array(
                "Targets (namespace/name) recently queried that no VirtualMetricEvent feeds; "
                "they get the defaultValue. Usually a typo in an HPA's selector.",
                string("namespace/name", max_length=317),
                max_items=20,
            ),
            "conditions": {
                **array("Ready, and the reason when the object is rejected.", condition(), max_items=16),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "learnedLeadTime": obj(
                "leadTime: Auto: the lead served and where it came from.",
                {
                    "seconds": number("The lead served: start-up percentile + sync period + ramp, clamped.", 0),
                    "reason": string("Measured, or Fallback when nothing was measurable.", max_length=64),
                    "message": string("Why the fallback was used."),
                    "startupSeconds": number("Percentile of pod creation -> Ready over the recent pods.", 0),
                    "percentile": number("Which percentile.", 0, 1),
                    "syncPeriodSeconds": number("The HPA sync period added.", 0),
                    "rampSeconds": number("Time the HPA scale-up policy needs for the expected step.", 0),
                    "pods": array("The pods the start-up was measured on.", string("Pod name.", max_length=253), 100),
                },
            ),
            "toleranceStep": obj(
                "stepPastTolerance: the latest decision per target an HPA asked for.",
                {
                    "targets": array(
                        "At most 20 targets.",
                        obj(
                            "One target.",
                            {
                                "target": string("namespace/name", max_length=317),
                                "reason": string(
                                    "Stepped (served just past the band), NotNeeded (the HPA acts on the value "
                                    "itself), Unknown (no HPA or replica count known: served unchanged) or "
                                    "Clamped (the step would exceed spec.max).",
                                    max_length=64,
                                ),
                                "hpa": string("namespace/name of the HPA read.", max_length=317),
                                "message": string("Why the value was served unchanged."),
                                "value": number("The value before the step."),
                                "served": number("The value served."),
                            },
                        ),
                        max_items=20,
                    ),
                },
            ),
        },
    )
    return top_level("A value to predict, served as an external metric (e.g. rps).", spec, status, spec_required=False)


EXACTLY_ONE_SOURCE_KIND = "[" + ", ".join(f"has(self.{kind})" for kind in KINDS) + "].filter(x, x).size() == 1"
KINDS_IN_WORDS = ", ".join(KINDS[:-1]) + " or " + KINDS[-1]


def source_kind_schemas() -> dict[str, Schema]:
    """The block of each registered source kind; refuses to build while the two disagree."""
    schemas = {
        "api": api_source(),
        "schedule": schedule_source(),
        "prometheus": prometheus_source(),
        "forecast": forecast_source(),
    }
    if set(schemas) != set(KINDS):
        raise RuntimeError(
            f"source kinds in adapter.sources.registry {sorted(KINDS)} and schemas in "
            f"adapter/crd.py {sorted(schemas)} differ: add the new kind's schema here"
        )
    return {kind: schemas[kind] for kind in KINDS}


def virtual_metric_event_schema() -> Schema:
    source = obj(
        f"Where events come from: exactly one of {KINDS_IN_WORDS}, plus the shared fetch settings.",
        {
            **source_kind_schemas(),
            **common_source_fields(),
        },
        rules=[(EXACTLY_ONE_SOURCE_KIND, f"exactly one of {KINDS_IN_WORDS} is required")],
    )
    resource = obj(
        "The target workload the value is for; HPAs select it with the label resource=<name>.",
        {
            "namespace": string("Namespace of the target (and of the HPA that reads it).", DNS1123_LABEL, 63),
            "name": string("Name of the target.", DNS1123_SUBDOMAIN, 253),
            "nameFromLabel": string(
                "Take the target's name from this label of each item (prometheus/forecast series).",
                max_length=317,
                min_length=1,
            ),
        },
        required=["namespace"],
        rules=[("has(self.name) != has(self.nameFromLabel)", "exactly one of name or nameFromLabel is required")],
    )
    entry = obj(
        "One contribution: an expression over the item's values, for one VirtualMetric and target.",
        {
            "name": string("spec.name of the VirtualMetric this contributes to.", METRIC_NAME, 253),
            "resource": resource,
            "value": obj(
                "How the value is computed.",
                {
                    "expression": {
                        "x-kubernetes-int-or-string": True,
                        "maxLength": 4096,
                        "pattern": r"\S",
                        "description": "Sandboxed arithmetic over the item's value names, e.g. "
                        "scheduledMessage * 2; functions min, max, ceil, floor, abs, "
                        "round.",
                    },
                },
                required=["expression"],
            ),
        },
        required=["name", "resource", "value"],
    )
    spec = obj(
        "A source of future events and the expressions that turn them into metric values.",
        {
            "source": source,
            "metrics": array("Contributions to VirtualMetrics, per target.", entry, max_items=1000, min_items=1),
        },
        required=["source", "metrics"],
    )
    status = obj(
        "Observed state, written by prescaler.",
        {
            "observedGeneration": integer("metadata.generation last processed.", 0, fmt="int64"),
            "sourceKind": string("Which source kind the spec uses (shown by kubectl get).", enum=list(KINDS)),
            "conditions": {
                **array("Ready, and the reasons when it is not.", condition(), max_items=16),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "lastSuccessfulFetchTime": {
                "type": "string",
                "format": "date-time",
                "description": "When the source was last fetched successfully.",
            },
            "itemCount": integer("Items in the current snapshot.", 0, fmt="int64"),
            "stale": boolean("True when no fetch has succeeded for staleAfter."),
            "regressors": array(
                "forecast source with regressors: the fitted effect of one announced unit, per series.",
                obj(
                    "One forecast series.",
                    {
                        "series": string("The series' labels.", max_length=1024),
                        "regressors": array(
                            "Per regressor.",
                            obj(
                                "Fitted effect.",
                                {
                                    "name": string("Regressor name.", max_length=64),
                                    "coefficient": number("Load added per announced unit."),
                                    "stderr": number("Standard error of the coefficient.", 0),
                                    "samples": integer("History steps where it was announced.", 0, fmt="int64"),
                                },
                            ),
                            8,
                        ),
                    },
                ),
                100,
            ),
        },
    )
    return top_level(
        "Future events (from an API, a schedule, Prometheus or a forecast) mapped onto "
        "VirtualMetrics per target workload.",
        spec,
        status,
        spec_required=True,
    )


def top_level(description: str, spec: Schema, status: Schema, spec_required: bool) -> Schema:
    schema: Schema = {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string", "description": "prescaler.pingpong.ai/v1"},
            "kind": {"type": "string", "description": "The resource kind."},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    if spec_required:
        schema["required"] = ["spec"]
    return schema


def crd(kind: str, plural: str, short: str, schema: Schema, columns: list[Schema]) -> Schema:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "prescaler", "app.kubernetes.io/part-of": "prescaler"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["prescaler"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def column(name: str, type_: str, path: str, description: str, priority: int = 0) -> Schema:
    col: Schema = {"name": name, "type": type_, "jsonPath": path, "description": description}
    if priority:
        col["priority"] = priority
    return col


AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


# Short names: `vm` and `vme` are taken by popular CRDs (KubeVirt's VirtualMachine is `vm`), so kubectl
# would resolve `kubectl get vm` to whichever it found first.
SHORT_NAMES = {"VirtualMetric": "pvm", "VirtualMetricEvent": "pvme"}
READY = column("Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "Valid and served.")


def virtual_metric_crd() -> Schema:
    return crd(
        "VirtualMetric",
        "virtualmetrics",
        SHORT_NAMES["VirtualMetric"],
        virtual_metric_schema(),
        [
            column(
                "Metric", "string", ".status.metricName", "External metric name served (spec.name or metadata.name)."
            ),
            READY,
            column("Strategy", "string", ".spec.mergeStrategy", "How contributions combine."),
            column("LeadTime", "string", ".spec.leadTime", "Lookahead for the served peak."),
            column("Targets", "integer", ".status.targets", "Targets currently served."),
            AGE,
        ],
    )


def virtual_metric_event_crd() -> Schema:
    return crd(
        "VirtualMetricEvent",
        "virtualmetricevents",
        SHORT_NAMES["VirtualMetricEvent"],
        virtual_metric_event_schema(),
        [
            column("Source", "string", ".status.sourceKind", "Source kind."),
            column(
                "Ready",
                "string",
                '.status.conditions[?(@.type=="Ready")].status',
                "Source fetched and expressions valid.",
            ),
            column("Items", "integer", ".status.itemCount", "Items in the current snapshot."),
            column("Stale", "boolean", ".status.stale", "No successful fetch for staleAfter.", priority=1),
            AGE,
        ],
    )


# ------------------------------------------------------------------ HorizontalPodPrescaler (the seed's third kind)

QUANTITY = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"


def horizontal_pod_prescaler_schema() -> Schema:
    """Namespaced, as in the seed. Never enforced: prescaler only reports whether the named HPA already
    has the External metric (condition HPAConfigured); `prescaler migrate` prints the change."""
    target = obj(
        "The per-pod value the HPA should keep (the seed's targetMetric): "
        "desired replicas = ceil(value / averageValue).",
        {
            "averageValue": {
                "x-kubernetes-int-or-string": True,
                "pattern": QUANTITY,
                "maxLength": 64,
                "description": 'Target value per pod, a number or a Kubernetes quantity (10, "2.5", "500m").',
            },
        },
        required=["averageValue"],
    )
    entry = obj(
        "One metric of the HPA: a VirtualMetric's served name and its per-pod target.",
        {
            "metric": obj(
                "The external metric.",
                {
                    "name": string("spec.name of a VirtualMetric.", METRIC_NAME, 253),
                },
                required=["name"],
            ),
            "target": target,
        },
        required=["metric", "target"],
    )
    spec = obj(
        "An existing HPA and the prescaler metrics it should scale on. prescaler never writes the HPA.",
        {
            "metrics": array(
                "External metrics the HPA should have; the selector is resource=<this object's name>.",
                entry,
                max_items=16,
                min_items=1,
            ),
            "scaleTargetRef": obj(
                "The existing HorizontalPodAutoscaler, in this object's namespace.",
                {
                    "apiVersion": string("autoscaling/v2 (or autoscaling/v1).", max_length=253),
                    "kind": string("HorizontalPodAutoscaler.", enum=["HorizontalPodAutoscaler"]),
                    "name": string("Name of the HPA.", DNS1123_SUBDOMAIN, 253),
                },
                required=["name"],
            ),
        },
        required=["metrics", "scaleTargetRef"],
    )
    status = obj(
        "Observed state, written by prescaler.",
        {
            "observedGeneration": integer("metadata.generation last processed.", 0, fmt="int64"),
            "conditions": {
                **array(
                    "HPAConfigured: whether the HPA has every metric; when False the message "
                    "holds the kubectl patch command that adds them.",
                    condition(),
                    max_items=16,
                ),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    )
    return top_level(
        "The seed's HorizontalPodPrescaler: which HPA should scale on which prescaler metric. "
        "Checked and reported, never enforced.",
        spec,
        status,
        spec_required=True,
    )


def horizontal_pod_prescaler_crd() -> Schema:
    doc = crd(
        "HorizontalPodPrescaler",
        "horizontalpodprescalers",
        "hpp",
        horizontal_pod_prescaler_schema(),
        [
            column("HPA", "string", ".spec.scaleTargetRef.name", "The HPA that should have the metrics."),
            column(
                "Configured",
                "string",
                '.status.conditions[?(@.type=="HPAConfigured")].status',
                "Whether the HPA has the External metrics.",
            ),
            AGE,
        ],
    )
    doc["spec"]["scope"] = "Namespaced"
    return doc


BUILDERS = {
    "VirtualMetric": virtual_metric_crd,
    "VirtualMetricEvent": virtual_metric_event_crd,
    "HorizontalPodPrescaler": horizontal_pod_prescaler_crd,
}
