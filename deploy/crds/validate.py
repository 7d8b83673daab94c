#!/usr/bin/env python3
"""Validate VirtualMetric / VirtualMetricEvent manifests offline against the CRDs beside this file.

    python deploy/crds/validate.py examples/*.yaml

It does what kube-apiserver does with a structural CRD schema, as far as a client can:
  - converts the CRD's openAPIV3Schema to JSON Schema (closed objects, int-or-string, nullable,
    preserve-unknown-fields) and checks it with `jsonschema`;
  - evaluates the CEL `x-kubernetes-validations` rules with `cel-python` (`celpy`) when installed
    (otherwise they are skipped and reported as skipped).
Unknown fields are reported as errors, as `kubectl apply` does with server-side field validation.
Exit status 1 when any object is invalid. Used by tests/test_manifests_crds.py.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

HERE = Path(__file__).resolve().parent
Schema = dict[str, Any]


# ------------------------------------------------------------------ CRD schema -> JSON Schema


def to_json_schema(node: Schema) -> Schema:
    """Translate one structural-schema node (recursively) into draft 2020-12 JSON Schema."""
    out: Schema = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "description", "default"):
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [to_json_schema(child) for child in value]
        elif key == "not":
            out[key] = to_json_schema(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        # Keep the value validations (pattern applies to strings only, minimum to numbers only).
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    preserve = node.get("x-kubernetes-preserve-unknown-fields", False)
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out \
            and not preserve:
        # Structural schemas drop unknown fields; strict field validation makes them errors.
        out["additionalProperties"] = False
    # OpenAPI 3.0 writes exclusive bounds as booleans beside minimum/maximum; JSON Schema as numbers.
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(flag) is True:
            out[flag] = out.pop(bound)
        elif out.get(flag) is False:
            del out[flag]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@dataclass
class Rule:
    path: tuple[str, ...]  # property names; "[]" steps into array items, "{}" into map values
    rule: str
    message: str


def cel_rules(node: Schema, path: tuple[str, ...] = ()) -> Iterator[Rule]:
    for item in node.get("x-kubernetes-validations", []):
        yield Rule(path, item["rule"], item.get("message", item["rule"]))
    for name, child in node.get("properties", {}).items():
        yield from cel_rules(child, path + (name,))
    if isinstance(node.get("items"), dict):
        yield from cel_rules(node["items"], path + ("[]",))
    if isinstance(node.get("additionalProperties"), dict):
        yield from cel_rules(node["additionalProperties"], path + ("{}",))


def _values_at(doc: Any, path: tuple[str, ...], where: str = "") -> Iterator[tuple[str, Any]]:
    if not path:
        yield where or "<root>", doc
        return
    step, rest = path[0], path[1:]
    if step == "[]" and isinstance(doc, list):
        for index, item in enumerate(doc):
            yield from _values_at(item, rest, f"{where}[{index}]")
    elif step == "{}" and isinstance(doc, dict):
        for key, item in doc.items():
            yield from _values_at(item, rest, f"{where}.{key}")
    elif isinstance(doc, dict) and step in doc:
        yield from _values_at(doc[step], rest, f"{where}.{step}" if where else step)


# ------------------------------------------------------------------ validator


def as_json(value: Any) -> Any:
    """What kubectl sends for a YAML value: PyYAML's dates and datetimes become the strings that
    kubectl's YAML reader keeps them as (it never produces timestamps for untyped fields)."""
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_json(item) for item in value]
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return value


@dataclass
class CrdValidator:
    kind: str
    schema: Schema
    rules: list[Rule]
    validator: jsonschema.protocols.Validator = field(init=False)
    _programs: list[tuple[Rule, Any]] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.validator = jsonschema.Draft202012Validator(to_json_schema(self.schema))

    def errors(self, doc: Any) -> list[str]:
        doc = as_json(doc)
        found = [f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
                 for error in self.validator.iter_errors(doc)]
        if not found:  # CEL runs only on schema-valid objects, as in the API server
            found.extend(self.cel_errors(doc))
        return found

    def cel_errors(self, doc: Any) -> list[str]:
        try:
            import celpy  # type: ignore[import-untyped]
        except ImportError:
            return []
        if self._programs is None:  # compiling is the slow part: once per CRD
            env = celpy.Environment()
            self._programs = [(rule, env.program(env.compile(rule.rule))) for rule in self.rules]
        out: list[str] = []
        for rule, program in self._programs:
            for where, value in _values_at(doc, rule.path):
                result = program.evaluate({"self": celpy.json_to_cel(value)})
                if not bool(result) or isinstance(result, celpy.CELEvalError):
                    out.append(f"{where}: {rule.message}")
        return out


def load_validators(crd_dir: Path = HERE) -> dict[str, CrdValidator]:
    """kind -> validator for every CRD in crd_dir (the storage version's schema)."""
    validators = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for crd in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
            schema = version["schema"]["openAPIV3Schema"]
            kind = crd["spec"]["names"]["kind"]
            validators[kind] = CrdValidator(kind, schema, list(cel_rules(schema)))
    return validators


def validate_documents(docs: Iterable[Any], validators: dict[str, CrdValidator]) -> list[str]:
    """Errors for every custom resource among docs, prefixed with Kind/name. Other kinds are ignored."""
    out: list[str] = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in validators:
            continue
        name = (doc.get("metadata") or {}).get("name", "?")
        out.extend(f"{doc['kind']}/{name}: {error}" for error in validators[doc["kind"]].errors(doc))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    validators = load_validators()
    failed = False
    for name in argv:
        try:
            docs = list(yaml.safe_load_all(Path(name).read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed = True
            continue
        for error in validate_documents(docs, validators):
            print(f"{name}: {error}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
