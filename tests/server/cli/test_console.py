"""The `wasm-runner` console: a command imports only what it needs."""

import json
import subprocess
import sys

import pytest

HEAVY = ["aiohttp", "pydantic", "numpy", "wasm_runner_server.app", "wasm_runner.execution.lanes",
         "wasm_runner.execution.workers"]


@pytest.fixture(scope="module", autouse=True)
def prepared(runner):
    """The session runner fixture has built and compiled the runtimes already."""


def test_run_imports_neither_the_service_nor_numpy_nor_the_batch_machinery():
    script = ("import json, sys\n"
              "from wasm_runner_server.cli.console import main\n"
              "code = main(['run', '-c', 'pass'])\n"
              f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [0, []]


def test_every_command_is_offered():
    done = subprocess.run([sys.executable, "-m", "wasm_runner_server.cli.console", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    for command in ("run", "prepare", "doctor", "batch", "serve", "mcp", "keys", "audit"):
        assert command in done.stdout
