"""The two wheels, built from this checkout and installed into a fresh virtual environment,
run Python and JavaScript through the library and the CLI with no checkout in reach.

The venv sees this interpreter's site-packages for the third-party dependencies (no index
needed); the project's own packages must come from the wheels, so every import is checked
to resolve inside the venv. The compiled runtimes in the shared cache are reused (their
cache key is the artifacts' content, not their path)."""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from wasm_runner_protocol import __version__

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
CLIENT = "wasm-runner-client"
NOT_SHIPPED = {".git", ".ci", "tests", "benchmarks", "docs", "scripts", ".venv", ".benchmarks", ".hypothesis"}
"""Top-level entries a build never reads (copying them would only cost time)."""
BUILD_LEFTOVERS = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.so", ".*_cache")
"""A build in place reuses build/lib, where files deleted from the tree live on: build from a clean copy."""


def copy_sources(target: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = set(BUILD_LEFTOVERS(directory, names))
        return skipped | (NOT_SHIPPED & set(names)) if Path(directory) == ROOT else skipped

    shutil.copytree(ROOT, target, ignore=ignore)
    return target


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that points Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return {**env, **extra}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    sources = copy_sources(tmp_path_factory.mktemp("build") / "src")
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out),
                    str(sources), str(sources / CLIENT)], check=True, timeout=600, env=clean_env())
    found = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert set(found) == {"wasm_runner", "wasm_runner_client"}, found
    return found


@pytest.fixture(scope="module")
def venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(home)],
                   check=True, timeout=120, env=clean_env())
    # pip from the base interpreter's site-packages, run by the venv's interpreter, installs into
    # the venv; --ignore-installed leaves the base's own (editable) install of the project alone.
    subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--ignore-installed", *map(str, wheels.values())], check=True, timeout=300, env=clean_env())
    return home


def run_in(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=300)


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    return [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]


def test_the_core_wheel_carries_every_runtime_file(wheels):
    files = wheel_files(wheels["wasm_runner"])
    runtimes = ROOT / "wasm_runner" / "_runtimes"
    expected = {"wasm_runner/_runtimes/" + p.relative_to(runtimes).as_posix() for p in runtimes.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
    assert {"wasm_runner/_runtimes/requirements.lock", "wasm_runner/_runtimes/python/manifest.toml",
            "wasm_runner/_runtimes/javascript/manifest.toml", "wasm_runner/_runtimes/python/guest/app.py",
            "wasm_runner/_runtimes/python/guest/wit/world.wit", "wasm_runner/_runtimes/javascript/driver.js",
            "wasm_runner/_runtimes/native/python-data.txt"} <= expected
    assert expected - files == set()
    assert {"wasm_runner/py.typed", "wasm_runner_server/py.typed"} <= files
    # the native tier's C helpers, compiled on first use where the wheel is installed
    assert {"wasm_runner/providers/native/launch.c", "wasm_runner/providers/native/egress_relay.c"} <= files
    assert not any(n.startswith(("wasm_runner_client/", "wasm_runner_protocol/", "tests/")) for n in files)


def test_the_client_wheel_is_the_client_and_the_schema_with_msgspec_and_httpx_only(wheels):
    files = wheel_files(wheels["wasm_runner_client"])
    tops = {n.split("/")[0] for n in files if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"wasm_runner_client", "wasm_runner_protocol"}
    assert {"wasm_runner_client/py.typed", "wasm_runner_protocol/py.typed"} <= files
    names = sorted(r.split(">")[0].split("=")[0].split(";")[0].strip() for r in wheel_requirements(wheels["wasm_runner_client"]))
    assert names == ["httpx", "msgspec"]


def test_both_wheels_have_the_one_version_and_the_core_pins_its_client(wheels):
    assert wheels["wasm_runner"].name.startswith(f"wasm_runner-{__version__}-")
    assert wheels["wasm_runner_client"].name.startswith(f"wasm_runner_client-{__version__}-")
    assert f"wasm-runner-client=={__version__}" in wheel_requirements(wheels["wasm_runner"])


LIBRARY_RUN = """
import importlib.metadata, importlib.resources, json, sys
import wasm_runner, wasm_runner_client, wasm_runner_protocol, wasm_runner_server
from wasm_runner import Runner

with Runner() as runner:
    py = runner.run_sync("import sys; print(6 * 7, sys.platform)")
    js = runner.run_sync("console.log([1, 2, 3].map(x => x * 2).join(','))", language="javascript")
print(json.dumps({
    "modules": [m.__file__ for m in (wasm_runner, wasm_runner_client, wasm_runner_protocol, wasm_runner_server)],
    "runtimes": str(importlib.resources.files("wasm_runner._runtimes")),
    "versions": [importlib.metadata.version(d) for d in ("wasm-runner", "wasm-runner-client")],
    "python": [py.stdout, py.exit_code],
    "javascript": [js.stdout, js.exit_code],
}))
"""


def test_the_library_runs_python_and_javascript_from_the_installed_wheels(venv, tmp_path):
    done = run_in(tmp_path, str(venv / "bin" / "python"), "-c", LIBRARY_RUN)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    for path in [*report["modules"], report["runtimes"]]:
        assert Path(path).resolve().is_relative_to(venv.resolve()), f"{path} is not from the venv"
        assert not Path(path).resolve().is_relative_to(ROOT), f"{path} is from the checkout"
    assert report["versions"] == [__version__, __version__]
    assert report["python"] == ["42 wasi\n", 0]
    assert report["javascript"] == ["2,4,6\n", 0]


def test_the_cli_runs_code_and_a_javascript_file_from_the_installed_wheels(venv, tmp_path):
    cli = str(venv / "bin" / "wasm-runner")
    done = run_in(tmp_path, cli, "run", "-c", "print(sum(range(10)))")
    assert (done.returncode, done.stdout) == (0, "45\n"), done.stderr
    (tmp_path / "powers.js").write_text("console.log(2 ** 10)\n")
    done = run_in(tmp_path, cli, "run", "powers.js")
    assert (done.returncode, done.stdout) == (0, "1024\n"), done.stderr
