"""The adapters' place in the layering: each is a distribution of its own that reaches wasm-runner through the
HTTP client only (never the core or the server), and no framework is a dependency of the core."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = sorted(path.parent for path in (ROOT / "integrations").glob("*/pyproject.toml"))
OURS = ("wasm_runner", "wasm_runner_server", "wasm_runner_client", "wasm_runner_protocol")


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_there_are_adapters() -> None:
    assert {path.name for path in ADAPTERS} >= {"deepagents", "smolagents", "openai-agents", "pydantic-ai", "google-adk"}


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda path: path.name)
def test_an_adapter_imports_only_the_client_of_ours(adapter: Path) -> None:
    for source in adapter.rglob("*.py"):
        ours = {name for name in imported(source) if name.split(".")[0] in OURS}
        assert all(name.split(".")[0] == "wasm_runner_client" for name in ours), (source, ours)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda path: path.name)
def test_an_adapter_declares_the_client_and_its_framework(adapter: Path) -> None:
    project = tomllib.loads((adapter / "pyproject.toml").read_text())["project"]
    names = [requirement.split(">")[0].split("=")[0].split("<")[0].strip() for requirement in project["dependencies"]]
    assert "wasm-runner-client" in names and len(names) == 2, names


def test_no_framework_is_a_dependency_of_the_core() -> None:
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    frameworks = set()
    for adapter in ADAPTERS:
        project = tomllib.loads((adapter / "pyproject.toml").read_text())["project"]
        frameworks.update(r.split(">")[0].split("=")[0].split("<")[0].strip() for r in project["dependencies"])
    frameworks.discard("wasm-runner-client")
    required = {r.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip() for r in core["dependencies"]}
    extras = {name: {r.split("=")[0].split(">")[0].strip() for r in values}
              for name, values in core["optional-dependencies"].items()}
    assert not frameworks & required
    assert all(not frameworks & values for name, values in extras.items() if name != "test"), extras
