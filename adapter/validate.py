"""``prescaler validate FILE|DIR...``: check manifests offline, the way the cluster and the server will.

For every VirtualMetric and VirtualMetricEvent document:

1. the CRD schema that kube-apiserver enforces (adapter/crd.py, the same description the installed
   CRDs are rendered from), converted to JSON Schema and checked with ``jsonschema``: closed objects,
   int-or-string, nullable, bounds, patterns;
2. the CRDs' CEL ``x-kubernetes-validations`` rules, evaluated with ``cel-python`` on schema-valid
   objects, as the API server does. cel-python is a runtime dependency for this: without it a
   manifest that ``kubectl apply`` rejects would pass here. If it is missing anyway, validate stops
   with exit code 2 instead of skipping the rules;
3. the server's own parser (adapter/resources.py and the source parsers): what prescaler rejects even
   when the API server accepts it;
4. the expressions, compiled with the same sandbox checks as the server, with the value names the
   source kind provides.

Across all the given files (warnings; errors with ``--strict``): a document of an unknown kind in the
prescaler group or one that looks like a misspelt prescaler kind (``kind: VirtualMetrics``), a
VirtualMetricEvent naming a metric that no VirtualMetric in the files defines, two VirtualMetrics
serving the same metric name, an object defined twice. Other kinds (Deployments, HPAs, ...) are
skipped, so a whole GitOps directory can be checked.

Exit codes for CI: 0 valid (warnings allowed), 1 invalid (or any warning with ``--strict``),
2 usage (no or missing paths, CEL unavailable). Each problem is one line:
``FILE:LINE: error: document N, Kind/name: field: message``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from adapter.crd import BUILDERS, GROUP
from adapter.fields import show_value
from adapter.yamlload import FastSafeLoader, SafeLoader

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
SUFFIXES = (".yaml", ".yml", ".json")
Schema = dict[str, Any]


class CelUnavailable(RuntimeError):
    """cel-python cannot be imported: the CEL rules cannot be checked."""


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
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out and not preserve:
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


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _shortened(error: Any) -> str:
    """jsonschema's message, with a long integer literal it quotes shortened (400 digits, say)."""
    instance = error.instance
    if isinstance(instance, int) and not isinstance(instance, bool) and instance.bit_length() > 128:
        return str(error.message).replace(repr(instance), show_value(instance))
    return str(error.message)


def oversized_integers(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """(field path, message) for each integer beyond int64, which no Kubernetes object holds (and
    CEL cannot read: its rules would fail as "could not be evaluated: overflow" on the object
    around it instead of naming the field)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from oversized_integers(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from oversized_integers(item, (*path, str(index)))
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        yield ".".join(path) or "<root>", f"{show_value(value)} is out of range: an integer must fit in 64 bits"


@dataclass
class CrdValidator:
    kind: str
    schema: Schema
    rules: list[Rule]
    validator: Any = field(init=False)
    _programs: list[tuple[Rule, Any]] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.validator = jsonschema.Draft202012Validator(to_json_schema(self.schema))

    def schema_errors(self, doc: Any) -> list[tuple[str, str]]:
        """(field path, message) pairs."""
        body = as_json(doc)
        found = [
            (".".join(str(p) for p in error.absolute_path) or "<root>", _shortened(error))
            for error in self.validator.iter_errors(body)
        ]
        named = {where for where, _ in found}
        return found + [(where, message) for where, message in oversized_integers(body) if where not in named]

    def errors(self, doc: Any) -> list[str]:
        found = [f"{where}: {message}" for where, message in self.schema_errors(doc)]
        if not found:  # CEL runs only on schema-valid objects, as in the API server
            found.extend(f"{where}: {message}" for where, message in self.cel_errors(doc))
        return found

    def cel_errors(self, doc: Any) -> list[tuple[str, str]]:
        celpy = _celpy()
        if self._programs is None:  # compiling is the slow part: once per CRD
            env = celpy.Environment()
            self._programs = [(rule, env.program(env.compile(rule.rule))) for rule in self.rules]
        out: list[tuple[str, str]] = []
        for rule, program in self._programs:
            for where, value in _values_at(as_json(doc), rule.path):
                try:
                    result = program.evaluate({"self": celpy.json_to_cel(value)})
                except Exception as exc:  # noqa: BLE001 - an evaluation error rejects, as in the API server
                    out.append((where, f"{rule.message} (rule could not be evaluated: {exc})"))
                    continue
                if isinstance(result, celpy.CELEvalError) or not bool(result):
                    out.append((where, rule.message))
        return out


def _celpy() -> Any:
    try:
        import celpy  # type: ignore[import-untyped]
    except ImportError as exc:
        raise CelUnavailable(
            f"the CRDs' CEL rules cannot be checked: cel-python is not installed ({exc}); pip install cel-python"
        ) from None
    return celpy


def _validator_for(crd: Mapping[str, Any]) -> CrdValidator:
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = version["schema"]["openAPIV3Schema"]
    return CrdValidator(crd["spec"]["names"]["kind"], schema, list(cel_rules(schema)))


def load_validators(crd_dir: Path | None = None) -> dict[str, CrdValidator]:
    """kind -> validator: from the CRD YAML files in crd_dir, or (default) from adapter/crd.py."""
    if crd_dir is None:
        return {kind: _validator_for(build()) for kind, build in BUILDERS.items()}
    validators = {}
    loader = FastSafeLoader
    for path in sorted(crd_dir.glob("*.yaml")):
        for crd in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                validator = _validator_for(crd)
                validators[validator.kind] = validator
    return validators


def validate_documents(docs: Iterable[Any], validators: dict[str, CrdValidator]) -> list[str]:
    """CRD schema and CEL errors for every custom resource among docs, as 'Kind/name: field: message'."""
    out: list[str] = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in validators:
            continue
        name = (doc.get("metadata") or {}).get("name", "?")
        out.extend(f"{doc['kind']}/{name}: {error}" for error in validators[doc["kind"]].errors(doc))
    return out


# ------------------------------------------------------------------ reading files


@dataclass
class Document:
    file: str
    index: int  # 1-based position in its file
    line: int  # 1-based line where it starts
    body: Any

    @property
    def kind(self) -> Any:
        return self.body.get("kind") if isinstance(self.body, dict) else None

    @property
    def name(self) -> str:
        meta = self.body.get("metadata") if isinstance(self.body, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) and name else "?"

    @property
    def label(self) -> str:
        return f"document {self.index}, {self.kind or '?'}/{self.name}"


@dataclass
class Problem:
    severity: str  # error | warning
    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.text}"


class UsageError(Exception):
    pass


def manifest_files(paths: Iterable[str]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
            if not found:
                raise UsageError(f"{name}: no {'/'.join(SUFFIXES)} files in this directory")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"{name}: no such file or directory")
    return files


def read_documents(path: Path, problems: list[Problem]) -> list[Document]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem("error", str(path), 1, f"cannot read: {exc}"))
        return []
    docs: list[Document] = []
    loader = SafeLoader(text)  # a bad date or integer scalar is a YAML error with its line too
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            body = loader.construct_document(node)
            line = node.start_mark.line + 1
            if body is None:
                continue
            if isinstance(body, dict) and body.get("kind") == "List" and isinstance(body.get("items"), list):
                docs.extend(Document(str(path), index, line, item) for item in body["items"])
            else:
                docs.append(Document(str(path), index, line, body))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        problems.append(Problem("error", str(path), mark.line + 1 if mark else 1, f"invalid YAML: {problem}"))
    finally:
        loader.dispose()
    return docs


# ------------------------------------------------------------------ checks


@dataclass
class Checked:
    """What the cross-document checks need from one valid or invalid object."""

    doc: Document
    metric_name: str | None = None  # VirtualMetric: the metric it serves
    references: list[tuple[int, str]] = field(default_factory=list)  # VME: (entry index, metric name)


class Validator:
    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.crds = load_validators()
        self.problems: list[Problem] = []
        self.checked = 0
        self.skipped = 0

    def error(self, doc: Document, text: str) -> None:
        self.problems.append(Problem("error", doc.file, doc.line, f"{doc.label}: {text}"))

    def warn(self, doc: Document, text: str) -> None:
        self.problems.append(Problem("warning", doc.file, doc.line, f"{doc.label}: {text}"))

    def run(self, paths: Iterable[str]) -> int:
        files = manifest_files(paths)
        objects: list[Checked] = []
        for path in files:
            for doc in read_documents(path, self.problems):
                checked = self.check_document(doc)
                if checked is not None:
                    objects.append(checked)
        self.cross_checks(objects)
        return self.exit_code()

    def exit_code(self) -> int:
        if any(p.severity == "error" for p in self.problems):
            return EXIT_INVALID
        if self.strict and self.problems:
            return EXIT_INVALID
        return EXIT_OK

    def check_document(self, doc: Document) -> Checked | None:
        if not isinstance(doc.body, dict):
            self.error(doc, f"not a mapping (got {type(doc.body).__name__})")
            return None
        kind = doc.kind
        if kind not in self.crds:
            self.check_other_kind(doc)
            return None
        self.checked += 1
        schema_fields: set[str] = set()
        crd = self.crds[kind]
        schema_errors = crd.schema_errors(doc.body)
        for where, message in schema_errors:
            schema_fields.add(where)
            self.error(doc, f"{where}: {message}")
        if not schema_errors:
            for where, message in crd.cel_errors(doc.body):
                schema_fields.add(where)
                self.error(doc, f"{where}: {message}")
        return self.check_with_server_parser(doc, schema_fields)

    def check_other_kind(self, doc: Document) -> None:
        kind, api_version = doc.kind, doc.body.get("apiVersion")
        group = api_version.split("/")[0] if isinstance(api_version, str) and "/" in api_version else ""
        if not kind and not api_version:
            # Not a Kubernetes object at all (a values file, a simulate scenario): visible, not fatal.
            self.warn(doc, "not a Kubernetes object (no apiVersion and kind): skipped")
            return
        if not isinstance(kind, str) or not kind:
            self.error(doc, "kind: required")
            return
        close = difflib.get_close_matches(kind, list(self.crds), n=1, cutoff=0.75)
        if close or group == GROUP:
            hint = f"; did you mean {close[0]}?" if close else ""
            self.warn(doc, f"kind: unknown kind {kind!r} ({api_version}): prescaler ignores this document{hint}")
            return
        self.skipped += 1  # another component's object (Deployment, HPA, Secret, ...)

    def check_with_server_parser(self, doc: Document, reported: set[str]) -> Checked:
        from adapter.errors import ValidationError
        from adapter.resources import KIND_METRIC, parse_virtual_metric, parse_virtual_metric_event
        from adapter.sources.registry import config_parsers

        checked = Checked(doc)
        try:
            if doc.kind == KIND_METRIC:
                vm = parse_virtual_metric(doc.body)
                checked.metric_name = vm.metric_name
            elif doc.kind == "HorizontalPodPrescaler":
                from adapter.store.hpp import HPPError, parse_hpp

                try:  # namespaced; its metric names are references like a VME's
                    hpp = parse_hpp(doc.body)
                except HPPError as exc:
                    self.error(doc, str(exc))
                    return checked
                checked.references = [(i, m.name) for i, m in enumerate(hpp.metrics)]
            else:
                vme = parse_virtual_metric_event(doc.body, config_parsers())
                checked.references = [(i, e.metric) for i, e in enumerate(vme.metrics)]
                self.check_expressions(doc, vme)
        except ValidationError as exc:
            # The schema said the same about this field already? (It writes items.0 for items[0].)
            if re.sub(r"\[(\d+)\]", r".\1", exc.path) not in reported:
                self.error(doc, f"{exc.path or '<root>'}: {exc.detail}")
            checked.metric_name, checked.references = self.best_effort_names(doc)
        return checked

    def check_expressions(self, doc: Document, vme: Any) -> None:
        from adapter.errors import ValidationError
        from adapter.expressions import compile_expression

        known = value_names(vme)
        for i, entry in enumerate(vme.metrics):
            path = f"spec.metrics[{i}].value.expression"
            try:
                compile_expression(entry.expression, path, known)
            except ValidationError as exc:
                self.error(doc, f"{exc.path or path}: {exc.detail}")

    @staticmethod
    def best_effort_names(doc: Document) -> tuple[str | None, list[tuple[int, str]]]:
        """Names for the cross checks from an object the parser rejected (no cascade of warnings)."""
        raw_spec = doc.body.get("spec")
        spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
        if doc.kind == "VirtualMetric":
            name = spec.get("name") or doc.name
            return (name if isinstance(name, str) else None), []
        raw_entries = spec.get("metrics")
        entries: list[Any] = raw_entries if isinstance(raw_entries, list) else []
        return None, [
            (i, e["name"]) for i, e in enumerate(entries) if isinstance(e, dict) and isinstance(e.get("name"), str)
        ]

    def cross_checks(self, objects: list[Checked]) -> None:
        served: dict[str, Checked] = {}
        seen: dict[tuple[Any, str], Checked] = {}
        for obj in objects:
            key = (obj.doc.kind, obj.doc.name)
            if key in seen and obj.doc.name != "?":
                first = seen[key].doc
                self.warn(
                    obj.doc,
                    f"metadata.name: {obj.doc.kind}/{obj.doc.name} is also defined in "
                    f"{first.file}:{first.line}; only one of them can exist in a cluster",
                )
            seen.setdefault(key, obj)
            if obj.metric_name is None:
                continue
            if obj.metric_name in served and served[obj.metric_name].doc.name != obj.doc.name:
                other = served[obj.metric_name].doc
                self.warn(
                    obj.doc,
                    f"spec.name: metric {obj.metric_name!r} is also served by "
                    f"VirtualMetric/{other.name} ({other.file}:{other.line}); only the older "
                    "object serves it",
                )
            served.setdefault(obj.metric_name, obj)
        for obj in objects:
            for index, metric in obj.references:
                if metric not in served:
                    self.warn(
                        obj.doc,
                        f"spec.metrics[{index}].name: no VirtualMetric in the given files "
                        f"serves metric {metric!r} (its values are not served until one does)",
                    )


def value_names(vme: Any) -> frozenset[str] | None:
    """Names the source kind is known to provide, so an expression using another name is rejected
    here as the server rejects it at load time."""
    from adapter.sources.registry import source_class

    try:
        provider = getattr(source_class(vme.source.kind), "value_names", None)
        names = provider(vme.source.config) if provider is not None else None
    except Exception:  # noqa: BLE001 - no list of names: every name is accepted, as in the server
        return None
    return frozenset(names) if names is not None else None


# ------------------------------------------------------------------ command line


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check VirtualMetric/VirtualMetricEvent manifests offline (for CI)",
        description="Check manifests offline as the cluster and prescaler will: the CRD schema and its CEL "
        "rules, the server's own parser and the expressions. Directories are searched for "
        "*.yaml, *.yml and *.json; other kinds of objects are skipped. Exit code 0 when valid "
        "(warnings allowed), 1 when invalid (or with a warning under --strict), 2 on a usage error.",
    )
    parser.add_argument("paths", nargs="+", metavar="FILE|DIR", help="manifest files or directories")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings (unknown kinds, metrics no VirtualMetric serves) as errors",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="print problems only, no summary line")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    validator = Validator(strict=args.strict)
    try:
        code = validator.run(args.paths)
    except (UsageError, CelUnavailable) as exc:
        print(f"prescaler validate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for problem in validator.problems:
        print(problem)
    if not args.quiet:
        errors = sum(p.severity == "error" for p in validator.problems)
        warnings = len(validator.problems) - errors
        verdict = "invalid" if code else "valid"
        print(
            f"{verdict}: {validator.checked} prescaler object(s) checked, {errors} error(s), "
            f"{warnings} warning(s), {validator.skipped} other document(s) skipped",
            file=sys.stderr,
        )
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prescaler")
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))
