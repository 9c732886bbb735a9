"""The core's import graph, read from its source with `ast` (no import runs, no runtime needed),
and what importing the facade loads (in a subprocess).

Layers, lowest first: the basics (errors, hints, capture, manifests, the guest-side assets, the
pure result helpers of evaluation), lowlevel, engine, then workspace and egress, then guest,
packages and profiles, then providers, processes (background processes on the native sandbox),
execution (executor, workers, batch lanes, the result cache and Ray dispatch they use), the
facade (runner, session), and on top the entry points that hold a Runner (the CLI, a worker
process, a Ray node). A module imports only its own layer and those below, counting
function-level and TYPE_CHECKING imports too; there is no cycle; no private name (`_x`) of one
module is used from another; and `import wasm_runner.session` loads no provider.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "wasm_runner"
RANKS = {
    "lowlevel": 1,
    "engine": 2,
    "workspace": 3, "egress": 3,
    "guest": 4, "packages": 4, "profiles": 4, "snapshots": 4,
    "providers": 5,
    "processes": 6,
    "execution": 7, "evaluation.cache": 7, "cluster": 7,
    "runner": 8, "session": 8, "snapshots.fork": 8, "snapshots.templates": 8,
    "cli": 9, "worker": 9, "cluster.node": 9,
}
"""A module's layer by the longest dotted prefix under the package that names one; anything else
is the basics (0): errors, hints, capture, manifests, _runtimes, evaluation's io_cases and summary."""

KNOWN_UPWARD: set[tuple[str, str]] = set()
"""Upward imports accepted with a reason (none today)."""

FOREIGN_PRIVATE = {
    "os._exit",  # a worker or relay process ends without running its parent's atexit hooks
    "zlib._Decompress",  # the type of zlib.decompressobj(), named in annotations
    "signal.Signals._value2member_map_",  # whether a number is a signal, without raising
    "ray._private",  # where Ray's `auto` address points, which Ray exposes nowhere else
}
"""Private names of other libraries the core cannot avoid."""
PRIVATE_DOORS = ("wasm_runner.lowlevel.capi", "wasm_runner._runtimes")
"""The one door to wasmtime-py's private API; and the guest-side drivers, which run inside the
guest (patching its own interpreter) and which no host module imports."""


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
    """The core module an import names (a name imported from a package may be a submodule)."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def _imports(tree: ast.Module) -> list[tuple[str, int]]:
    """(imported module, line) for every import, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub if sub in MODULES else node.module, node.lineno))
    return found


def _edges() -> dict[str, dict[str, int]]:
    edges: dict[str, dict[str, int]] = {name: {} for name in MODULES}
    for name, tree in TREES.items():
        for imported, line in _imports(tree):
            target = _target(imported) if imported.startswith(PACKAGE + ".") else None
            if target is not None and target != name:
                edges[name].setdefault(target, line)
    return edges


PUBLIC_FACE = max(RANKS.values()) + 1
"""The package itself re-exports the public names of every layer: it sits above them all."""


def _rank(module: str) -> int:
    parts = module.split(".")[1:]
    if not parts:
        return PUBLIC_FACE
    for end in range(len(parts), 0, -1):
        rank = RANKS.get(".".join(parts[:end]))
        if rank is not None:
            return rank
    return 0


def test_imports_point_down_the_layers() -> None:
    upward = [f"{a}:{line} imports {b}" for a, targets in _edges().items() for b, line in targets.items()
              if _rank(b) > _rank(a) and (a, b) not in KNOWN_UPWARD]
    assert not upward, "\n".join(sorted(upward))


def test_the_known_upward_imports_still_exist() -> None:
    edges = _edges()
    assert [pair for pair in KNOWN_UPWARD if pair[1] not in edges[pair[0]]] == []


def test_every_named_layer_exists() -> None:
    """A layer renamed or moved away must be renamed here too, or its modules fall to the basics."""
    assert [name for name in RANKS if f"{PACKAGE}.{name}" not in MODULES] == []


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


def _private_uses(module: str) -> list[str]:
    if module.startswith(PRIVATE_DOORS):
        return []
    crossing = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ImportFrom):
            crossing += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                         if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner not in ("self", "cls", "super()") and not any(
                    f"{owner}.{node.attr}".startswith(name) for name in FOREIGN_PRIVATE):
                crossing.append(f"{node.lineno}: {owner}.{node.attr}")
    return crossing


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_a_module(module: str) -> None:
    assert _private_uses(module) == []


LOADED = """
import json, sys
import wasm_runner.session
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_the_session_loads_no_provider() -> None:
    """The facade needs the providers' interface, not a provider: a service that never runs a
    native call never loads the native tier's modules (nor the WebAssembly provider's)."""
    done = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(done.stdout)
    assert "wasm_runner.session" in loaded
    providers = [m for m in loaded if m.startswith("wasm_runner.providers.") and m != "wasm_runner.providers.base"]
    assert providers == []
