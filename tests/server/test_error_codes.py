"""Error codes are defined once, in `wasm_runner_protocol.errors.ErrorCode`, and only named elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from wasm_runner.workspace.file_errors import FileOpError
from wasm_runner_protocol.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "wasm_runner_server"
CLIENT = ROOT / "wasm-runner-client" / "wasm_runner_client"
CORE = ROOT / "wasm_runner"

CLIENT_SIDE = {ErrorCode.STREAM_ENDED}
"""Codes only the client makes (documented so in the enum)."""
CODE_ARGUMENT = {"ApiError": 1, "ClientApiError": 1, "not_found": 0, "overloaded": 2, "tool_error": 0, "ProfileError": 0}
"""Where a call takes its error code, by the called name."""


def _sources(*roots: Path) -> list[Path]:
    return sorted(path for root in roots for path in root.rglob("*.py") if "_runtimes" not in path.parts)


def _literal_codes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func).rpartition(".")[2]
        position = CODE_ARGUMENT.get(name)
        arguments = [node.args[position]] if position is not None and len(node.args) > position else []
        if name in CODE_ARGUMENT or name == "ErrorDetail":
            arguments += [k.value for k in node.keywords if k.arg == "code"]
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}({ast.unparse(a)})" for a in arguments
                  if isinstance(a, (ast.Constant, ast.JoinedStr))]
    return found


@pytest.mark.parametrize("path", _sources(SERVER, CLIENT, CORE), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_error_code_is_written_as_a_string(path: Path) -> None:
    assert _literal_codes(path) == []


def _named_members(*roots: Path) -> set[str]:
    named = set()
    for path in _sources(*roots):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ErrorCode":
                named.add(node.attr)
    return named


def test_every_code_is_used_where_it_is_made() -> None:
    made_by_service = _named_members(SERVER, CORE)
    made_by_client = _named_members(CLIENT)
    unused = sorted(m.name for m in ErrorCode if m not in CLIENT_SIDE and m.name not in made_by_service)
    assert unused == [], "remove these codes, or list them in CLIENT_SIDE if only the client makes them"
    assert sorted(m.name for m in CLIENT_SIDE if m.name not in made_by_client) == []


def test_a_code_is_its_name_in_lower_case() -> None:
    assert [m for m in ErrorCode if m.value != m.name.lower()] == []


def _file_errors(cls: type[FileOpError]) -> list[type[FileOpError]]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _file_errors(child))]


@pytest.mark.parametrize("error", _file_errors(FileOpError), ids=lambda cls: cls.__name__)
def test_file_errors_carry_error_codes(error: type[FileOpError]) -> None:
    assert type(error.code) is ErrorCode
