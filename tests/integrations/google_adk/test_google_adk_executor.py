"""`WasmRunnerCodeExecutor` with the real Google ADK, in an environment of its own.

google-adk's requirements (google-genai 2.x, opentelemetry-api<=1.44, watchdog 6) conflict with the project's
test environment, so this test makes a virtual environment with uv holding the pinned ADK, the adapter and the
client (both editable, from this repository), cached under ~/.cache/wasm-runner/test-venvs/<hash of the pins>
and rebuilt when the pins change, and runs adk_scenarios.py in it against the service the fixture started."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = [pytest.mark.runtimes, pytest.mark.native]

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = Path(__file__).with_name("adk_scenarios.py")
ADAPTER = ROOT / "integrations" / "google-adk"
CLIENT = ROOT / "wasm-runner-client"
# google-adk 2.13.0, the newest: BaseCodeExecutor.execute_code with CodeExecutionResult.exit_code, and the LLM
# flow that passes the ADK session's id as execution_id to a stateful executor (integrations/google-adk).
PINS = ("google-adk==2.13.0",)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wasm-runner" / "test-venvs"
BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 300


def uv() -> list[str]:
    """uv, as the project's own dependency (the shared environment's), else the one on PATH."""
    try:
        import uv as uv_package  # noqa: PLC0415 - only to find its binary
        return [uv_package.find_uv_bin()]
    except ImportError:
        found = shutil.which("uv")
        if found is None:
            raise RuntimeError("uv is needed to build the ADK test environment (pip install uv)") from None
        return [found]


def pins_key() -> str:
    """Changes with the pins, the adapter's and the client's requirements, the interpreter, and the checkout
    (the editable installs point into it)."""
    digest = hashlib.sha256()
    for part in (*PINS, (ADAPTER / "pyproject.toml").read_text(), (CLIENT / "pyproject.toml").read_text(),
                 sys.executable, sys.version, str(ROOT)):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def build(venv: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    commands = [
        [*uv(), "venv", "--quiet", "--python", sys.executable, str(venv)],
        # Editable: the environment runs this checkout's adapter and client, so only a change of the pins
        # needs a new one.
        [*uv(), "pip", "install", "--quiet", "--python", str(python), *PINS, "-e", str(CLIENT), "-e", str(ADAPTER)],
    ]
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def adk_python() -> Path:
    """The interpreter of the ADK environment, built once per change of the pins (a lock serialises runs)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / f"google-adk-{pins_key()}"
    ready = venv / ".ready"
    with open(CACHE / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            build(venv)
            ready.write_text("\n".join(PINS) + "\n")
    return venv / "bin" / "python"


def scenario(adk_python: Path, name: str, service_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": ""}  # the environment's own packages, not this one's
    done = subprocess.run([str(adk_python), str(SCENARIOS), name, service_url], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env, cwd=SCENARIOS.parent, check=False)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip().endswith(f"{name}: ok"), done.stdout


def test_the_pins_fit_the_adapters_requirements() -> None:
    declared = {Requirement(r).name: Requirement(r) for r in
                tomllib.loads((ADAPTER / "pyproject.toml").read_text())["project"]["dependencies"]}
    for pin in map(Requirement, PINS):
        assert declared[pin.name].specifier.contains(next(iter(pin.specifier)).version), (pin, declared[pin.name])


def test_the_environment_has_the_pinned_adk_and_this_adapter(adk_python: Path) -> None:
    done = subprocess.run([str(adk_python), "-c", "import google.adk, wasm_runner_google_adk as a; "
                           "print(google.adk.__version__); print(a.__file__)"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True,
                          env={**os.environ, "PYTHONPATH": ""})
    version, adapter = done.stdout.split()
    assert f"google-adk=={version}" in PINS
    assert Path(adapter).resolve().is_relative_to(ADAPTER)


def test_the_adapter_type_checks_against_the_pinned_adk(adk_python: Path) -> None:
    """mypy (the project's, with its configuration) on the adapter, resolving imports in the ADK environment:
    outside it google.adk is missing, so the adapter is not in the project's own mypy run."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--python-executable", str(adk_python), "--cache-dir", str(adk_python.parents[1] / ".mypy"),
                           str(ADAPTER / "wasm_runner_google_adk")],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_executor_runs_code_in_a_session_per_adk_session(adk_python: Path, service_url: str) -> None:
    """State persists within an ADK session only, errors come back as stderr and an exit code, input files go
    in once, created files and figures come back as output files, and close() deletes the sessions."""
    scenario(adk_python, "executor", service_url)


def test_an_llm_agent_runs_its_code_blocks_in_wasm_runner(adk_python: Path, service_url: str) -> None:
    """An LlmAgent with the executor, a scripted model and ADK's InMemoryRunner: three code blocks (state kept,
    a file written, an error the model is shown), the file saved as an artifact, and a later turn of the same
    ADK session that finds the variables and the file."""
    scenario(adk_python, "agent", service_url)
