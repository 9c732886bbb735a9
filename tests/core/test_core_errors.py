"""Every exception the core defines is a `WasmRunnerError` (keeping the built-in base it had, so
`except RuntimeError` around a process call still catches a refused start).

Read from the source with `ast`: a class deriving from a built-in exception must also derive
from WasmRunnerError, directly or through another core class that does. The guest-side drivers
(`_runtimes`) run inside the guest and are not the host's errors; a private class (`_Stop`) is
control flow caught inside its own module, never raised to a caller.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from wasm_runner import WasmRunnerError
from wasm_runner.egress.policy import PolicyError
from wasm_runner.errors import InvalidRequestError
from wasm_runner.processes import ProcessError, ProcessesClosed, ProcessLimitError, ProcessNotFound

ROOT = Path(__file__).resolve().parents[2] / "wasm_runner"
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}
ROOTS = {"WasmRunnerError"}


def _classes() -> dict[str, list[tuple[str, list[str]]]]:
    """Class name -> [(where, base names)] over the core (a name may be defined twice)."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for path in ROOT.rglob("*.py"):
        if "_runtimes" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                found.setdefault(node.name, []).append((f"{path.relative_to(ROOT.parent)}:{node.lineno}", bases))
    return found


CLASSES = _classes()


def _is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
    if name in BUILTIN_EXCEPTIONS or name in ROOTS:
        return True
    return name not in seen and any(_is_exception(b, seen | {name}) for _, bases in CLASSES.get(name, [])
                                    for b in bases)


def _under_root(bases: list[str], seen: frozenset[str] = frozenset()) -> bool:
    for base in bases:
        if base in ROOTS:
            return True
        if base not in seen and any(_under_root(b, seen | {base}) for _, b in CLASSES.get(base, [])):
            return True
    return False


def test_every_core_exception_is_a_wasm_runner_error() -> None:
    outside = [f"{where} {name}({', '.join(bases)})" for name, defs in CLASSES.items() for where, bases in defs
               if not name.startswith("_") and any(_is_exception(b) for b in bases) and not _under_root(bases)]
    assert outside == []


@pytest.mark.parametrize(("error", "builtin"), [(ProcessError, RuntimeError), (ProcessLimitError, RuntimeError),
                                                (ProcessNotFound, RuntimeError), (ProcessesClosed, RuntimeError),
                                                (PolicyError, ValueError)])
def test_the_errors_a_caller_catches_keep_their_builtin_base(error: type[Exception], builtin: type) -> None:
    assert issubclass(error, WasmRunnerError) and issubclass(error, builtin)


def test_a_refused_policy_is_an_invalid_request() -> None:
    assert issubclass(PolicyError, InvalidRequestError)
