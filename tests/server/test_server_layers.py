"""The service's import graph, read from its source with `ast` (no import runs, no runtime needed).

Layers, lowest first: the service's own basics (config, errors, metrics, data_dir, storage), sessions/ and cluster/,
http/, security/, mcp/, then the composition root (app) and the command line. A module imports
only its own layer and those below, so security builds on http and sessions and never the
reverse; there is no cycle even through function-level or TYPE_CHECKING imports; and no private
name (`_x`) of one module is used from another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "wasm_runner_server"
RANKS = {"sessions": 1, "cluster": 1, "http": 2, "console": 2, "security": 3, "mcp": 4, "app": 5, "cli": 6, "__main__": 7}
"""A module's layer by its first component under the package; anything else is the basics (0). cluster/
(leases, takeovers) is the sessions' own layer: the manager opens it, and it moves the manager's sessions."""

KNOWN_UPWARD = {
    # AuthSettings and McpSettings are the [auth] and [mcp] tables of the configuration file, leaf pydantic models.
    ("wasm_runner_server.config", "wasm_runner_server.security.settings"),
    ("wasm_runner_server.config", "wasm_runner_server.mcp.settings"),
    # The stdio entry point runs a whole service in-process (create_app) and logs as `serve` does.
    ("wasm_runner_server.mcp.stdio", "wasm_runner_server.app"),
    ("wasm_runner_server.mcp.stdio", "wasm_runner_server.cli.serve"),
    # ...and parses its arguments with the console's own `mcp` command.
    ("wasm_runner_server.mcp.stdio", "wasm_runner_server.cli.commands"),
}
FOREIGN_PRIVATE = {"os._exit"}
"""Private names of other libraries the service cannot avoid (the type of add_subparsers())."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _target(imported: str) -> str | None:
    """The server module an import names (a name imported from a package may be a submodule)."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def _imports(tree: ast.Module) -> list[tuple[str, int, str | None]]:
    """(imported module, line, name imported from it) for every import, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub if sub in MODULES else node.module, node.lineno, alias.name))
    return found


def _edges() -> dict[str, dict[str, int]]:
    edges: dict[str, dict[str, int]] = {name: {} for name in MODULES}
    for name, tree in TREES.items():
        for imported, line, _ in _imports(tree):
            target = _target(imported) if imported.startswith(PACKAGE + ".") else None
            if target is not None and target != name:
                edges[name].setdefault(target, line)
    return edges


PUBLIC_FACE = len(RANKS) + 1
"""The package itself re-exports (lazily) from every layer: it sits above them all."""


def _rank(module: str) -> int:
    parts = module.split(".")
    return RANKS.get(parts[1], 0) if len(parts) > 1 else PUBLIC_FACE


def test_imports_point_down_the_layers() -> None:
    upward = [f"{a}:{line} imports {b}" for a, targets in _edges().items() for b, line in targets.items()
              if _rank(b) > _rank(a) and (a, b) not in KNOWN_UPWARD]
    assert not upward, "\n".join(sorted(upward))


def test_the_known_upward_imports_still_exist() -> None:
    edges = _edges()
    assert [pair for pair in KNOWN_UPWARD if pair[1] not in edges[pair[0]]] == []


def test_no_import_cycle() -> None:
    edges = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in edges:
        if module not in index:
            visit(module)
    assert cycles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_a_module(module: str) -> None:
    crossing = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ImportFrom):
            crossing += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                         if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner not in ("self", "cls", "super()") and f"{owner}.{node.attr}" not in FOREIGN_PRIVATE:
                crossing.append(f"{node.lineno}: {owner}.{node.attr}")
    assert crossing == []
