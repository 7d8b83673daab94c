"""The CRDs in deploy/crds: structure, and that their schemas accept and reject what the code does.

The schema check uses deploy/crds/validate.py (CRD schema -> JSON Schema with `jsonschema`, CEL rules
with `cel-python`), i.e. what kube-apiserver would say on `kubectl apply`.
"""

from __future__ import annotations

import copy
import datetime
import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.errors import ValidationError
from adapter.resources import parse_virtual_metric, parse_virtual_metric_event
from adapter.sources.registry import config_parsers

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is ~8x faster on the CRDs
ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"
SEED_DIRS = [ROOT / "tests" / "data" / "seed", ROOT / "examples" / "seed"]


def _load_module(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


crd_validate = _load_module("prescaler_crd_validate", CRD_DIR / "validate.py")
crd_generate = _load_module("prescaler_crd_generate", CRD_DIR / "generate.py")
VALIDATORS = crd_validate.load_validators(CRD_DIR)


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    out = {}
    for path in CRD_DIR.glob("*.yaml"):
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SafeLoader)
        out[doc["spec"]["names"]["kind"]] = doc
    return out


def errors(doc: dict[str, Any]) -> list[str]:
    return VALIDATORS[doc["kind"]].errors(doc)


def seed_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for directory in SEED_DIRS:
        for path in sorted(directory.glob("*.y*ml")):
            docs.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return docs


def _ca_pem() -> str:
    """A real self-signed CA certificate: the code loads caBundle with the ssl module."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


CA_PEM = _ca_pem()

VM: dict[str, Any] = {
    "apiVersion": "prescaler.pingpong.ai/v1",
    "kind": "VirtualMetric",
    "metadata": {"name": "rps"},
    "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum"},
}
VME: dict[str, Any] = {
    "apiVersion": "prescaler.pingpong.ai/v1",
    "kind": "VirtualMetricEvent",
    "metadata": {"name": "stage-vme"},
    "spec": {
        "source": {"api": {"url": "https://stage.example/service-a/metrics"}},
        "metrics": [
            {
                "name": "rps",
                "resource": {"name": "service-a", "namespace": "service-a"},
                "value": {"expression": "scheduledMessage * 2"},
            }
        ],
    },
}


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of base with the dotted path set (list indexes as numbers); value None deletes it."""
    doc = copy.deepcopy(base)
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    node: Any = doc
    for key in keys[:-1]:
        node = node[key]
    if value is None:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return doc


# ------------------------------------------------------------------ generated files and CRD shape


def test_committed_crds_match_the_generator() -> None:
    assert crd_generate.main(["--check"]) == 0, "run python deploy/crds/generate.py"


@pytest.mark.parametrize(
    "kind,plural,short",
    [("VirtualMetric", "virtualmetrics", "pvm"), ("VirtualMetricEvent", "virtualmetricevents", "pvme")],
)
def test_crd_names_scope_and_subresources(kind: str, plural: str, short: str) -> None:
    crd = crds()[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{plural}.prescaler.pingpong.ai"
    spec = crd["spec"]
    assert spec["group"] == "prescaler.pingpong.ai" and spec["scope"] == "Cluster"
    assert spec["names"]["plural"] == plural and spec["names"]["shortNames"] == [short]
    [version] = spec["versions"]
    assert version["name"] == "v1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    def columns(kind: str) -> dict[str, str]:
        [version] = crds()[kind]["spec"]["versions"]
        return {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}

    assert columns("VirtualMetric") == {
        "Metric": ".status.metricName",
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Strategy": ".spec.mergeStrategy",
        "LeadTime": ".spec.leadTime",
        "Targets": ".status.targets",
        "Age": ".metadata.creationTimestamp",
    }
    vme = columns("VirtualMetricEvent")
    assert vme["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert vme["Items"] == ".status.itemCount" and vme["Source"] == ".status.sourceKind"
    assert vme["Age"] == ".metadata.creationTimestamp"


def _walk(node: dict[str, Any], path: str = "") -> Any:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", ["VirtualMetric", "VirtualMetricEvent"])
def test_schema_is_structural_and_documented(kind: str) -> None:
    """Every node has a type (or is int-or-string / preserve-unknown); fields have descriptions
    (`kubectl explain` shows them); arrays are bounded (CEL cost estimation needs maxItems)."""
    [version] = crds()[kind]["spec"]["versions"]
    for path, node in _walk(version["schema"]["openAPIV3Schema"]):
        special = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        assert "type" in node or special, f"{path}: no type"
        assert not ("type" in node and node.get("x-kubernetes-int-or-string")), path
        if path.count(".") >= 2 and not path.endswith("{}") and not path.startswith(".metadata"):
            assert node.get("description"), f"{path}: no description"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path}: unbounded array"


def test_every_cel_rule_compiles() -> None:
    import celpy

    env = celpy.Environment()
    rules = [rule for validator in VALIDATORS.values() for rule in validator.rules]
    assert len(rules) >= 6
    for rule in rules:
        env.compile(rule.rule)


# ------------------------------------------------------------------ the seed and the examples


def test_seed_manifests_validate_unchanged() -> None:
    docs = seed_docs()
    kinds = [d["kind"] for d in docs]
    assert "VirtualMetric" in kinds and "VirtualMetricEvent" in kinds, kinds
    assert crd_validate.validate_documents(docs, VALIDATORS) == []


def test_every_example_custom_resource_validates() -> None:
    """examples/ is written by others: check whatever VirtualMetric/VirtualMetricEvent it holds."""
    checked = 0
    problems = []
    for path in sorted((ROOT / "examples").rglob("*.y*ml")):
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
        checked += sum(d.get("kind") in VALIDATORS for d in docs)
        problems += [f"{path.relative_to(ROOT)}: {e}" for e in crd_validate.validate_documents(docs, VALIDATORS)]
    print(f"validated {checked} custom resources under examples/")
    assert problems == []


def test_validate_cli_reports_invalid_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump_all([VM, VME]))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(with_(VM, "spec.mergeStrategy", "Median")))
    assert crd_validate.main([str(good)]) == 0
    assert crd_validate.main([str(good), str(bad)]) == 1
    assert "VirtualMetric/rps: spec.mergeStrategy" in capsys.readouterr().out


# ------------------------------------------------------------------ accepted and rejected objects

VALID = {
    "seed VM": VM,
    "seed VME": VME,
    "VM without spec": {k: v for k, v in VM.items() if k != "spec"},
    "VM extensions": with_(
        VM,
        "spec",
        {
            "name": "rps",
            "defaultValue": 1.5,
            "mergeStrategy": "Max",
            "leadTime": "5m",
            "holdTime": 30,
            "min": 0,
            "max": 100000,
        },
    ),
    "VM zero durations": with_(VM, "spec", {"leadTime": "0", "holdTime": "0s"}),
    "VM metric name with colon": with_(VM, "spec.name", "chat:rps_total"),
    "VME common settings beside the kind": with_(
        VME,
        "spec.source",
        {
            "api": {"url": "http://127.0.0.1:8080/items"},
            "interval": "30s",
            "timeout": "5s",
            "staleAfter": "150s",
            "onStale": "UseKnown",
        },
    ),
    "VME common settings inside the block": with_(VME, "spec.source.api.interval", 15),
    "VME nameFromLabel": with_(VME, "spec.metrics.0.resource", {"namespace": "ns", "nameFromLabel": "service"}),
    "VME constant expression": with_(VME, "spec.metrics.0.value.expression", 5),
    "VME api with everything": with_(
        VME,
        "spec.source.api",
        {
            "url": "https://api.example/items",
            "headers": [
                {"name": "X-Team", "value": "chat"},
                {
                    "name": "Authorization",
                    "valueFrom": {"secretKeyRef": {"namespace": "ns", "name": "tok", "key": "token"}},
                },
            ],
            "maxResponseBytes": 1048576,
            "tls": {"caBundle": CA_PEM, "insecureSkipVerify": False},
            "allowLinkLocal": True,
            "timeout": "2s",
        },
    ),
    "VME schedule": with_(
        VME,
        "spec.source",
        {
            "schedule": {
                "timeZone": "Asia/Seoul",
                "lookahead": "24h",
                "items": [
                    {"start": 1700545800, "end": 1700545860, "values": {"scheduledMessage": 50}, "id": "b1"},
                    {"start": "2024-11-21T09:00:00+09:00", "end": "2024-11-21T09:10:00+09:00"},
                ],
                "windows": [
                    {"cron": "0 9 * * 1-5", "duration": "10m", "values": {"scheduledMessage": 100}},
                    {"days": ["Mon", "Fri"], "start": "12:00", "end": "13:30", "values": {"x": 1}, "timeZone": "UTC"},
                ],
                "exclude": ["2024-12-25", datetime.date(2024, 12, 31)],
            }
        },
    ),  # YAML reads 2024-12-31 as a date
    "VME schedule with YAML 1.1 clock integers and day ranges": with_(
        VME,
        "spec.source",
        {
            "schedule": {
                "windows": [
                    {
                        "days": ["mon-fri", "Sunday"],
                        "start": 1200,
                        "end": "24:00",
                        "values": {"x": 1},
                        "exclude": ["2026-01-01"],
                    }
                ]
            }
        },
    ),
    "VME prometheus": with_(
        VME,
        "spec.source",
        {
            "prometheus": {
                "url": "http://prometheus.monitoring:9090",
                "query": "sum(rate(http_requests_total[1m]))",
                "auth": {
                    "basic": {
                        "username": "u",
                        "password": {"secretKeyRef": {"namespace": "m", "name": "p", "key": "pw"}},
                    }
                },
                "tls": {"caFile": "/etc/ssl/ca.pem"},
            },
            "interval": "1m",
        },
    ),
    "VME forecast": with_(
        VME,
        "spec.source",
        {
            "forecast": {
                "history": {
                    "prometheus": {
                        "url": "http://prom:9090",
                        "query": "sum(rate(x[5m]))",
                        "step": "5m",
                        "length": "336h",
                        "auth": {"bearerTokenFile": "/var/run/token"},
                    }
                },
                "model": "auto",
                "season": "1d",
                "horizon": "1h",
                "step": "5m",
                "quantile": 0.9,
            }
        },
    ),
    "VME forecast from api history": with_(
        VME,
        "spec.source",
        {"forecast": {"history": {"api": {"url": "https://history.example/items"}}, "model": "holtWinters"}},
    ),
}

INVALID = {
    # (document, fragment of the expected error)
    "unknown top-level field": (with_(VM, "extra", 1), "Additional properties"),
    "unknown VM spec field": (with_(VM, "spec.mergeStrategyy", "Sum"), "mergeStrategyy"),
    "bad mergeStrategy": (with_(VM, "spec.mergeStrategy", "sum"), "is not one of"),
    "min above max": (with_(VM, "spec", {"min": 10, "max": 5}), "min must not be greater than max"),
    "duration with words": (with_(VM, "spec.leadTime", "5 minutes"), "does not match"),
    "negative duration": (with_(VM, "spec.holdTime", "-5s"), "does not match"),
    "value beyond 1e15": (with_(VM, "spec.max", 1e16), "maximum"),
    "metric name with slash": (with_(VM, "spec.name", "a/b"), "does not match"),
    "string defaultValue": (with_(VM, "spec.defaultValue", "many"), "is not of type"),
    "two sources": (with_(VME, "spec.source.schedule", {"items": []}), "exactly one of api, schedule"),
    "no source kind": (with_(VME, "spec.source", {"interval": "30s"}), "exactly one of api, schedule"),
    "missing source": (with_(VME, "spec.source", None), "'source' is a required property"),
    "unknown source kind": (with_(VME, "spec.source.kafka", {}), "kafka"),
    "unknown api field": (with_(VME, "spec.source.api.method", "POST"), "method"),
    "api without url": (with_(VME, "spec.source.api", {"timeout": "1s"}), "'url' is a required property"),
    "non-http url": (with_(VME, "spec.source.api.url", "file:///etc/passwd"), "does not match"),
    "bad onStale": (with_(VME, "spec.source.onStale", "Drop"), "is not one of"),
    "empty metrics": (with_(VME, "spec.metrics", []), "should be non-empty"),
    "unknown metric entry field": (with_(VME, "spec.metrics.0.weight", 2), "weight"),
    "name and nameFromLabel": (
        with_(VME, "spec.metrics.0.resource.nameFromLabel", "svc"),
        "exactly one of name or nameFromLabel",
    ),
    "neither name nor nameFromLabel": (
        with_(VME, "spec.metrics.0.resource.name", None),
        "exactly one of name or nameFromLabel",
    ),
    "namespace with capitals": (with_(VME, "spec.metrics.0.resource.namespace", "Service-A"), "does not match"),
    "blank expression": (with_(VME, "spec.metrics.0.value.expression", "  "), "does not match"),
    "missing value": (with_(VME, "spec.metrics.0.value", None), "'value' is a required property"),
    "header with value and valueFrom": (
        with_(
            VME,
            "spec.source.api.headers",
            [{"name": "A", "value": "x", "valueFrom": {"secretKeyRef": {"namespace": "n", "name": "s", "key": "k"}}}],
        ),
        "exactly one of value or valueFrom",
    ),
    "secretKeyRef without namespace": (
        with_(
            VME, "spec.source.api.headers", [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
        ),
        "'namespace' is a required",
    ),
    "bad forecast model": (
        with_(VME, "spec.source", {"forecast": {"history": {"api": {"url": "http://h"}}, "model": "prophet"}}),
        "is not one of",
    ),
    "forecast with two histories": (
        with_(
            VME,
            "spec.source",
            {"forecast": {"history": {"api": {"url": "http://h"}, "prometheus": {"url": "http://p", "query": "up"}}}},
        ),
        "exactly one of prometheus or api",
    ),
    "quantile above one": (
        with_(VME, "spec.source", {"forecast": {"history": {"api": {"url": "http://h"}}, "quantile": 1.5}}),
        "maximum",
    ),
    "cron window without duration": (
        with_(VME, "spec.source", {"schedule": {"windows": [{"cron": "0 9 * * *", "values": {"x": 1}}]}}),
        "duration is required with cron",
    ),
    "duration without cron": (
        with_(
            VME,
            "spec.source",
            {"schedule": {"windows": [{"start": "09:00", "end": "10:00", "duration": "5m", "values": {"x": 1}}]}},
        ),
        "only allowed with cron",
    ),
    "cron with days": (
        with_(
            VME,
            "spec.source",
            {"schedule": {"windows": [{"cron": "0 9 * * *", "duration": "5m", "days": ["Mon"], "values": {"x": 1}}]}},
        ),
        "not both",
    ),
    "daily window without end": (
        with_(VME, "spec.source", {"schedule": {"windows": [{"start": "09:00", "values": {"x": 1}}]}}),
        "needs start and end",
    ),
    "window without values": (
        with_(VME, "spec.source", {"schedule": {"windows": [{"start": "09:00", "end": "10:00"}]}}),
        "'values' is a required property",
    ),
    "empty schedule": (
        with_(VME, "spec.source", {"schedule": {"timeZone": "UTC"}}),
        "at least one of items or windows",
    ),
    "bad week day": (
        with_(
            VME,
            "spec.source",
            {"schedule": {"windows": [{"days": ["Mo"], "start": "09:00", "end": "10:00", "values": {"x": 1}}]}},
        ),
        "does not match",
    ),
    "bad exclude date": (
        with_(VME, "spec.source", {"schedule": {"items": [{"start": 1, "end": 2}], "exclude": ["25.12.2024"]}}),
        "does not match",
    ),
    "two prometheus auth methods": (
        with_(
            VME,
            "spec.source",
            {
                "prometheus": {
                    "url": "http://p",
                    "query": "up",
                    "auth": {"bearerTokenFile": "/t", "basic": {"username": "u", "passwordFile": "/p"}},
                }
            },
        ),
        "exactly one of bearerToken",
    ),
    "basic auth without password": (
        with_(
            VME, "spec.source", {"prometheus": {"url": "http://p", "query": "up", "auth": {"basic": {"username": "u"}}}}
        ),
        "exactly one of password or passwordFile",
    ),
    "credentials in the url": (
        with_(VME, "spec.source.api.url", "https://user:pw@api.example/items"),
        "does not match",
    ),
    "header value with a line break": (
        with_(VME, "spec.source.api.headers", [{"name": "A", "value": "x\r\nB: y"}]),
        "does not match",
    ),
    "insecureSkipVerify with caBundle": (
        with_(VME, "spec.source.api.tls", {"insecureSkipVerify": True, "caBundle": "-----BEGIN CERTIFICATE-----"}),
        "cannot be combined",
    ),
    "tiny maxResponseBytes": (with_(VME, "spec.source.api.maxResponseBytes", 10), "minimum"),
    "quantile at one half": (
        with_(VME, "spec.source", {"forecast": {"history": {"api": {"url": "http://h"}}, "quantile": 0.5}}),
        "less than or equal",
    ),
    "VME without spec": ({k: v for k, v in VME.items() if k != "spec"}, "'spec' is a required property"),
}


@pytest.mark.parametrize("name", list(VALID))
def test_schema_accepts(name: str) -> None:
    assert errors(VALID[name]) == []


@pytest.mark.parametrize("name", list(INVALID))
def test_schema_rejects(name: str) -> None:
    doc, expected = INVALID[name]
    found = errors(doc)
    assert found, f"{name}: accepted"
    assert any(expected in e for e in found), found


# ------------------------------------------------------------------ agreement with adapter/resources.py


def _code_accepts(doc: dict[str, Any]) -> bool:
    """The code's verdict: adapter/resources.py with the real source parsers (adapter/sources)."""
    try:
        if doc["kind"] == "VirtualMetric":
            parse_virtual_metric(doc)
        else:
            parse_virtual_metric_event(doc, config_parsers())
    except ValidationError:
        return False
    return True


AGREEMENT = [*VALID, *INVALID]


@pytest.mark.parametrize("name", AGREEMENT)
def test_code_and_schema_agree(name: str) -> None:
    doc = VALID[name] if name in VALID else INVALID[name][0]
    assert _code_accepts(doc) == (errors(doc) == []), name


# Deliberate differences (README.md, "Running in a cluster"): Kubernetes has no number-or-string type, so the CRD asks for
# plain numbers and duration strings, while the code (also used with --manifests) is more lenient.
STRICTER_SCHEMA = {
    "quoted number": with_(VM, "spec.defaultValue", "10"),
    "fractional seconds as a number": with_(VM, "spec.leadTime", 2.5),
}


@pytest.mark.parametrize("name", list(STRICTER_SCHEMA))
def test_documented_differences_are_still_true(name: str) -> None:
    doc = STRICTER_SCHEMA[name]
    assert _code_accepts(doc) and errors(doc), (
        f"{name}: no longer a difference; update the README section Running in a cluster"
    )
