"""The python-data toolchain: a native CPython venv with the data-science stack, built once.

`ensure_python_data()` creates a venv from a system interpreter and installs the packages
pinned in wasm_runner/_runtimes/native/python-data.txt (wheels only), then writes a marker naming the
requirements' sha256. Later calls return at once; nothing is installed at run time. The
sandbox mounts the venv read-only at /opt/python-data.

Build it with `wasm-runner prepare`, or `python -m wasm_runner.providers.native prepare`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from wasm_runner.errors import RuntimeUnavailableError
from wasm_runner.manifests import RUNTIMES_DIR

log = logging.getLogger("wasm_runner.native")

REQUIREMENTS = RUNTIMES_DIR / "native" / "python-data.txt"
MARKER = ".wasm-runner-ready.json"
SMOKE_IMPORTS = "pandas, numpy, matplotlib, seaborn, scipy, sklearn, PIL, openpyxl, fastapi, flask, uvicorn"
"""Imported once after the build. Not weasyprint: it loads the system's Pango when imported, and a host
without it (doctor says so) still gets the rest of the environment."""
SYSTEM_PYTHONS = ("/usr/bin/python3",)
LAYOUT = 3
"""Bumped when the venv's layout changes (not its packages): an older build is rebuilt."""
WORKSPACE_PTH = "wasm_runner_workspace.pth"
"""Puts /workspace on sys.path (after the stdlib and site-packages) so scripts import their helpers."""


class ToolchainError(RuntimeUnavailableError):
    """The python-data environment could not be built; the message says what to do."""


@dataclass(frozen=True)
class PythonData:
    """A built python-data environment."""

    path: Path
    python_version: str
    base_prefix: str
    """The base interpreter's prefix; the sandbox must see it read-only at the same path."""

    @property
    def interpreter(self) -> Path:
        return self.path / "bin" / "python"


def cache_root() -> Path:
    """$WASM_RUNNER_CACHE, else $XDG_CACHE_HOME/wasm-runner, else ~/.cache/wasm-runner."""
    return Path(os.environ.get("WASM_RUNNER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "wasm-runner"))


def python_data_dir() -> Path:
    """Where the venv lives: $WASM_RUNNER_PYTHON_DATA, else <cache>/python-data."""
    explicit = os.environ.get("WASM_RUNNER_PYTHON_DATA")
    return Path(explicit) if explicit else cache_root() / "python-data"


def requirements_digest(requirements: Path = REQUIREMENTS) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()


def find_python_data(path: Path | None = None, requirements: Path = REQUIREMENTS) -> PythonData | None:
    """The built environment if it is complete and matches the pinned requirements, else None."""
    path = path or python_data_dir()
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    try:
        current = requirements_digest(requirements)
    except OSError:
        current = marker.get("requirements_sha256")  # installed without the repo: trust the marker
    if (marker.get("requirements_sha256") != current or marker.get("layout") != LAYOUT
            or not (path / "bin" / "python").exists()):
        return None
    return PythonData(path, marker.get("python", ""), marker.get("base_prefix", ""))


def base_python(explicit: str | None = None) -> str:
    """The interpreter to build the venv from: a system one whose files the sandbox shows.

    $WASM_RUNNER_PYTHON_DATA_BASE overrides; else /usr/bin/python3 when present; else the
    interpreter running this code (its prefix is then bound read-only into the sandbox).
    """
    chosen = explicit or os.environ.get("WASM_RUNNER_PYTHON_DATA_BASE")
    if chosen:
        return chosen
    for candidate in SYSTEM_PYTHONS:
        if os.access(candidate, os.X_OK):
            return candidate
    return getattr(sys, "_base_executable", None) or sys.executable


def ensure_python_data(
    *,
    path: Path | None = None,
    python: str | None = None,
    requirements: Path = REQUIREMENTS,
    force: bool = False,
    quiet: bool = True,
) -> PythonData:
    """Build the python-data venv unless an up-to-date one exists; return it.

    Safe to call concurrently (a file lock serialises builders) and again (a no-op when
    the marker matches the requirements). Raises ToolchainError with the cause.
    """
    path = path or python_data_dir()
    if not force:
        found = find_python_data(path, requirements)
        if found is not None:
            return found
    if not requirements.is_file():
        raise ToolchainError(f"the pinned requirements file is missing: {requirements}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force:
            found = find_python_data(path, requirements)
            if found is not None:
                return found
        return _build(path, base_python(python), requirements, quiet)


def _build(path: Path, python: str, requirements: Path, quiet: bool) -> PythonData:
    log.info("building the python-data environment in %s (from %s)", path, python)
    shutil.rmtree(path, ignore_errors=True)
    out = subprocess.DEVNULL if quiet else None
    try:
        _run([python, "-m", "venv", str(path)], "create the venv (on Debian/Ubuntu: apt-get install python3-venv)", out)
        pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
               "--only-binary", ":all:", "-r", str(requirements)]
        if quiet:
            pip.insert(4, "--quiet")
        _run(pip, "install the pinned packages (needs access to PyPI)", out)
        _run([str(path / "bin" / "python"), "-c", f"import {SMOKE_IMPORTS}"], "import the installed packages", out)
        info = subprocess.run(
            [str(path / "bin" / "python"), "-c",
             ("import sys, json, sysconfig; "
              "print(json.dumps([sys.version.split()[0], sys.base_prefix, sysconfig.get_path('purelib')]))")],
            capture_output=True, text=True, check=True)
        version, prefix, purelib = json.loads(info.stdout)
        Path(purelib, WORKSPACE_PTH).write_text("/workspace\n")
        relocate_scripts(path)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    marker = {"requirements_sha256": requirements_digest(requirements), "layout": LAYOUT, "python": version,
              "base_prefix": prefix}
    (path / MARKER).write_text(json.dumps(marker))
    log.info("python-data ready: Python %s in %s", version, path)
    return PythonData(path, version, prefix)


RELOCATABLE_SHEBANG = b"#!/bin/sh\n'''exec' \"${0%/*}/python\" \"$0\" \"$@\"\n' '''\n"
"""A console script's first lines that run the `python` beside it: the sandbox sees the venv at
/opt/python-data, not at the host path pip writes into shebangs (so `weasyprint`, `uvicorn` or
`flask` would fail with "not found"). /bin/sh runs the `exec` line; Python reads a string there."""


def relocate_scripts(venv: Path) -> int:
    """Rewrite the venv's console scripts to find their interpreter beside them; returns how many."""
    host_shebang = f"#!{venv}/bin/python".encode()
    count = 0
    for script in (venv / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        text = script.read_bytes()
        if not text.startswith(host_shebang):
            continue
        script.write_bytes(RELOCATABLE_SHEBANG + text.partition(b"\n")[2])
        count += 1
    return count


def _run(argv: list[str], what: str, out: int | None) -> None:
    try:
        done = subprocess.run(argv, check=False, stdout=out, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise ToolchainError(f"could not {what}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise ToolchainError(f"could not {what}: exit status {done.returncode}\n{tail}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m wasm_runner.providers.native prepare",
                                     description="Build the python-data environment of the native provider.")
    parser.add_argument("--force", action="store_true", help="rebuild even if an up-to-date one exists")
    parser.add_argument("--python", help="base interpreter (default: /usr/bin/python3)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        env = ensure_python_data(python=args.python, force=args.force, quiet=False)
    except ToolchainError as exc:
        print(f"python-data: {exc}", file=sys.stderr)
        return 1
    print(f"python-data ready: Python {env.python_version} at {env.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
