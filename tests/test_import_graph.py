"""The packages' import graph: no cycle (imports inside functions and under TYPE_CHECKING
count), and no private name of one module used from another."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "wasm_runner": ROOT / "wasm_runner",
    "wasm_runner_protocol": ROOT / "wasm-runner-client" / "wasm_runner_protocol",
    "wasm_runner_client": ROOT / "wasm-runner-client" / "wasm_runner_client",
    "wasm_runner_server": ROOT / "wasm_runner_server",
}
EXCLUDED = ("wasm_runner._runtimes",)
"""Guest code: it runs inside the sandbox and imports nothing of the host."""
LOWLEVEL = "wasm_runner.lowlevel"
"""The one door to wasmtime's private API (checked by its own contract test)."""
PENDING = {
    "wasm_runner.providers.wasm.javascript": "still calls wasmtime's private API itself: it moves behind lowlevel",
}
"""Modules whose private-name crossings are being removed on another branch; drop each on merge."""


def _modules() -> dict[str, Path]:
    modules = {}
    for package, directory in PACKAGES.items():
        for path in directory.rglob("*.py"):
            parts = [package, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if not name.startswith(EXCLUDED):
                modules[name] = path
    return modules


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _known(name: str) -> str | None:
    while name not in MODULES:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name


def _imports(module: str, tree: ast.Module) -> set[str]:
    """Every module of ours that `module` imports, wherever the import statement is."""
    found = set()
    is_package = MODULES[module].name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: None if is_package else -1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            known = _known(target)
            if known is not None and known != module:
                found.add(known)
                # Importing a.b.c runs a and a.b too (unless `module` is inside them).
                parts = known.split(".")
                for i in range(1, len(parts)):
                    parent = ".".join(parts[:i])
                    if parent in MODULES and not module.startswith(parent + "."):
                        found.add(parent)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _private_definitions(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, module globals, attributes of self."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


DEFINED = {name: _private_definitions(tree) for name, tree in TREES.items()}


def _private_crossings(module: str) -> list[str]:
    """`from x import _y`, and `obj._y` where `_y` is another module's private name, not this one's."""
    if module.startswith(LOWLEVEL) or module in PENDING:
        return []
    tree = TREES[module]
    elsewhere = set().union(*(names for other, names in DEFINED.items() if other != module)) - DEFINED[module]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _known(node.module or "") is not None:
            found += [f"{module}:{node.lineno} from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Attribute) and node.attr in elsewhere:
            base = ast.unparse(node.value)
            if base not in ("self", "cls"):
                found.append(f"{module}:{node.lineno} {base}.{node.attr}")
    return found


def _of(package: str, names: list[str]) -> list[str]:
    return [n for n in names if n == package or n.startswith(package + ".")]


GRAPH = {name: _imports(name, tree) for name, tree in TREES.items()}
CORE = ["wasm_runner", "wasm_runner_protocol", "wasm_runner_client"]


@pytest.mark.parametrize("package", [*CORE, "wasm_runner_server"])
def test_no_import_cycle(package):
    cycles = [c for c in _cycles(GRAPH) if _of(package, c)]
    assert cycles == []


@pytest.mark.parametrize("package", [*CORE, "wasm_runner_server"])
def test_no_private_name_crosses_a_module(package):
    crossings = [c for module in _of(package, list(MODULES)) for c in _private_crossings(module)]
    assert crossings == []


def test_the_client_and_the_protocol_never_import_the_core_or_the_server():
    for module in _of("wasm_runner_protocol", list(MODULES)) + _of("wasm_runner_client", list(MODULES)):
        heavy = [t for t in GRAPH[module] if _of("wasm_runner", [t]) or _of("wasm_runner_server", [t])]
        assert heavy == [], module


def test_the_core_never_imports_the_server():
    for module in _of("wasm_runner", list(MODULES)):
        assert not _of("wasm_runner_server", sorted(GRAPH[module])), module
