"""The shape of the house: imports flow one way, functions and modules stay readable.

Each sub-package sits on a layer and imports only from layers below it (or within itself); the
module import graph, lazy imports inside functions included, has no cycle.
"""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
#: bottom to top: a package may import from its own layer's package and from any layer below
LAYERS = (
    ("units", "errors", "_version"),
    ("files",),
    ("_toml",),
    ("hardware", "models"),
    ("parallelism",),
    ("formats", "network"),
    ("perf",),
    ("job",),
    ("planner", "simulation"),
    ("reliability",),
    ("validation", "calibration"),
    ("reports",),
    ("cli",),
    ("__main__", "api"),
    ("__init__",),
)
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
MAX_FUNCTION_LINES = 150
MAX_MODULE_LINES = 600


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for f in (SRC / "supercluster").rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The project modules ``name`` imports, anywhere in its body."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                out.add(sub if sub in modules else mod)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != name}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_is_on_a_layer():
    packages = {_package(m) for m in _modules()}
    assert packages <= set(LAYER_OF), sorted(packages - set(LAYER_OF))


def test_imports_flow_down_the_layers():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        here = _package(name)
        for dep in _imports(name, path, modules):
            there = _package(dep)
            if there != here and LAYER_OF[there] >= LAYER_OF[here]:
                wrong.append(f"{name} imports {dep} ({there} is not below {here})")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_module_graph_has_no_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, trail: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle.extend(trail[trail.index(dep):] + [node, dep] if dep in trail else [node, dep])
                return True
            if dep not in state and visit(dep, trail + [node]):
                return True
        state[node] = 2
        return False

    for name in sorted(graph):
        if name not in state and visit(name, []):
            break
    assert not cycle, " -> ".join(cycle)


def test_functions_and_modules_stay_readable():
    long = []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_MODULE_LINES:
            long.append(f"module {name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"function {name}.{node.name}: {n} lines")
    assert not long, "\n".join(long)


def test_the_checks_see_a_violation(tmp_path):
    """The graph reader finds relative imports, lazy ones included (a check that cannot fail is none)."""
    f = tmp_path / "x.py"
    f.write_text("def g():\n    from ..perf import step\n    from .layout import Layout\n", encoding="utf-8")
    mods = {"supercluster.perf.step": f, "supercluster.parallelism.layout": f, "supercluster.parallelism.x": f}
    assert _imports("supercluster.parallelism.x", f, mods) == {"supercluster.perf.step",
                                                              "supercluster.parallelism.layout"}
