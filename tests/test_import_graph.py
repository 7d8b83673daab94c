"""The package's import graph: no cycles, and no module imports a layer above its own.

Data flows one way (sources -> items -> expressions -> contributions -> timelines -> the API), and
the imports follow it. The graph is read from the source with `ast` (every `import` statement,
including the ones inside functions; `if TYPE_CHECKING:` blocks are skipped: they never run).

To place a new module: add its dotted name (or a package prefix) to the layer it belongs to in
LAYERS. The longest matching prefix decides, so `adapter.sim.cli` can sit above `adapter.sim`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "adapter"

# Low to high. A module may import modules of its own layer and of the layers below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundations",
        (
            "adapter",  # the package itself: __version__
            "adapter.version",
            "adapter.errors",
            "adapter.quantity",
            "adapter.durations",
            "adapter.timefmt",
            "adapter.labels",
            "adapter.fields",
            "adapter.tscsv",
            "adapter.yamlload",
            "adapter.observability",
            "adapter.logs",
            "adapter.handoff",
            "adapter.announced_metrics",
            "adapter.heap",
        ),
    ),
    (
        "model",
        (
            "adapter.resources",
            "adapter.items",
            "adapter.expressions",
            "adapter.policy",
        ),
    ),
    (
        "sources",
        (
            "adapter.sources",
            "adapter.forecast",
        ),
    ),
    (
        "pipeline",
        (
            "adapter.timeline",
            "adapter.pipeline",
            "adapter.status_board",
        ),
    ),
    (
        "engine",
        (
            "adapter.engine",
            "adapter.publisher",
            "adapter.sim",  # the simulator drives the same pipeline as the engine, at simulated time
        ),
    ),
    (
        "serving",
        (
            "adapter.api",
            "adapter.serving",
            "adapter.store",
            "adapter.auth",
            "adapter.preview",
            "adapter.upstream",
            "adapter.crd",  # the CRD schemas (Kubernetes-facing), built from the source registry
        ),
    ),
    (
        "cli",
        (
            "adapter.cli",
            "adapter.forecast.cli",
            "adapter.sim.cli",
            "adapter.sim.plot",
            "adapter.serving.certs_cli",
            "adapter.demo",
            "adapter.validate",
            "adapter.migrate",
        ),
    ),
]


# Known exceptions, each a deferred (function-level) import with the reason it is still there. Every
# check ignores these edges; test_allowed_exceptions_still_exist fails once one is gone, so the list
# only shrinks. Do not add to it to make a new import pass: move the code instead.
ALLOWED_IMPORTS: dict[tuple[str, str], str] = {
    (
        "adapter.sources.forecast_regressors",
        "adapter.sources.registry",
    ): "forecast regressors build other source kinds; should receive the registry from the caller",
}


def layer_of(module: str) -> tuple[int, str]:
    """(rank, layer name) of the longest prefix in LAYERS that matches `module`."""
    best: tuple[int, int, str] | None = None  # (prefix length, rank, name)
    for rank, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # The package root ("adapter") names itself only, or every unlisted module would match it.
            covers = module == prefix or ("." in prefix and module.startswith(prefix + "."))
            if covers and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank, name)
    if best is None:
        raise LookupError(module)
    return best[1], best[2]


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = module_files()


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield child
                yield from _runtime_nodes(child)
            continue
        yield node
        yield from _runtime_nodes(node)


def imports_of(module: str) -> set[str]:
    """The adapter modules `module` imports (a `from package import name` counts as the submodule
    when `name` is one, else as the package)."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "adapter")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "adapter":
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in MODULES else target)
    found.discard(module)
    return {name for name in found if name in MODULES}


RAW_GRAPH = {module: imports_of(module) for module in MODULES}
GRAPH = {module: {t for t in targets if (module, t) not in ALLOWED_IMPORTS} for module, targets in RAW_GRAPH.items()}


def test_allowed_exceptions_still_exist():
    gone = [edge for edge in ALLOWED_IMPORTS if edge[1] not in RAW_GRAPH.get(edge[0], set())]
    assert not gone, f"remove these from ALLOWED_IMPORTS, they are fixed: {gone}"


def test_every_module_has_a_layer():
    missing = []
    for module in MODULES:
        try:
            layer_of(module)
        except LookupError:
            missing.append(module)
    assert not missing, f"add these modules to LAYERS in {__file__}: {missing}"


def test_no_module_imports_a_layer_above_it():
    upward = []
    for module, targets in GRAPH.items():
        rank, name = layer_of(module)
        for target in sorted(targets):
            target_rank, target_name = layer_of(target)
            if target_rank > rank:
                upward.append(f"{module} ({name}) imports {target} ({target_name})")
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in sorted(graph):
        if state.get(root):
            continue
        path = [root]
        stack = [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(step) == 1:
                return path[path.index(step) :] + [step]
            if not state.get(step):
                state[step] = 1
                path.append(step)
                stack.append(iter(sorted(graph.get(step, ()))))
    return None


def test_no_import_cycles():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def package_graph() -> dict[str, set[str]]:
    """The graph with each module collapsed to its top-level unit (`adapter.sources.api` ->
    `adapter.sources`), so two packages that import each other through different modules count too."""

    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        graph.setdefault(unit(module), set()).update(unit(t) for t in targets if unit(t) != unit(module))
    return graph


def test_no_cycles_between_packages():
    cycle = find_cycle(package_graph())
    assert cycle is None, "packages import each other: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    "graph,expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set(), "c": {"a", "b"}}, None),
    ],
)
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert find_cycle(graph) == expected


def test_the_layer_rule_sees_a_real_upward_import():
    # The check itself must be able to fail: resources importing the registry was the old cycle.
    assert layer_of("adapter.resources")[0] < layer_of("adapter.sources.registry")[0]
    assert layer_of("adapter.sim.cli")[1] == "cli" and layer_of("adapter.sim.metrics")[1] == "engine"
    assert "adapter.sources.base" in GRAPH["adapter.sources.runner"]
    assert "adapter.observability" in GRAPH["adapter.sources.runner"]  # `from adapter import observability`
