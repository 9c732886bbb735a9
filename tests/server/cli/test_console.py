"""The `wasm-runner` console: a command imports only what it needs."""

import json
import subprocess
import sys

import pytest

HEAVY = ["aiohttp", "pydantic", "numpy", "wasm_runner_server.app", "wasm_runner.execution.lanes",
         "wasm_runner.execution.workers",
         # a WebAssembly run needs neither the native tier nor an HTTP client nor the tenants' store
         "wasm_runner.providers.native", "urllib3", "httpx", "psycopg", "wasm_runner_server.security.tenants"]


@pytest.fixture(scope="module", autouse=True)
def prepared(runner):
    """The session runner fixture has built and compiled the runtimes already."""


def test_run_imports_neither_the_service_nor_numpy_nor_the_batch_machinery_nor_the_native_tier():
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
    for command in ("run", "prepare", "doctor", "batch", "serve", "mcp", "keys", "oauth", "members", "roles", "audit",
                    "processes", "sessions", "exec", "files", "upload", "download", "packages", "egress"):
        assert command in done.stdout


def test_the_executable_exits_with_the_guests_status_and_its_output_written():
    console = [sys.executable, "-m", "wasm_runner_server.cli.console"]
    done = subprocess.run([*console, "run", "-c", "print('x' * 100000)\nimport sys; sys.exit(3)"],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (3, "x" * 100000 + "\n"), done.stderr
    done = subprocess.run([*console, "run", "--json", "-c", "print(1)"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["stdout"] == "1\n"


def test_a_usage_error_exits_as_argparse_says():
    done = subprocess.run([sys.executable, "-m", "wasm_runner_server.cli.console", "run", "--timeout", "soon"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid float value" in done.stderr
