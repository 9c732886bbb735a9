"""The client and the wire schema import without the sandbox, the service or their dependencies."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

HEAVY = ["wasmtime", "numpy", "aiohttp", "pydantic", "wasm_runner", "wasm_runner_server"]
CLIENT_PROJECT = Path(__file__).resolve().parents[2] / "wasm-runner-client" / "pyproject.toml"


@pytest.mark.parametrize("package", ["wasm_runner_client", "wasm_runner_protocol"])
def test_importing_it_loads_none_of_the_sandbox_or_the_service(package):
    probe = f"import sys, json, {package}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == []


def test_the_client_distribution_requires_only_msgspec_and_httpx():
    with CLIENT_PROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    names = sorted(r.split(">")[0].split("=")[0].split(";")[0].strip() for r in project["dependencies"])
    assert names == ["httpx", "msgspec"]
    assert "optional-dependencies" not in project
