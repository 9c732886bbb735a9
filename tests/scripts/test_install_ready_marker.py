"""scripts/install (which scripts/serve runs first) does nothing a second time when nothing it
installs changed, and redoes its work when something did.

The script runs in a copy of its checkout's shape where every step that installs is a stand-in
writing to a log: apt (install-native.sh, install-browser.sh), pip, compileall and
`wasm-runner prepare`. The real interpreter answers the rest (the checks themselves)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STEP = '#!/bin/sh\necho "{name} $*" >> "$STEPS_LOG"\n'
PYTHON = f"""#!/bin/sh
case "$1 $2" in
  "-m pip"|"-m compileall") echo "python3 $*" >> "$STEPS_LOG"; exit 0 ;;
esac
exec {sys.executable} "$@"
"""


def checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A checkout with the real scripts/install, its steps replaced by stand-ins, on a PATH of stand-ins."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "install", root / "scripts" / "install")
    for name in ("install-native.sh", "install-browser.sh"):
        (root / "scripts" / name).write_text(STEP.format(name=name))
        (root / "scripts" / name).chmod(0o755)
    for path in ("pyproject.toml", "setup.py", "wasm-runner-client/pyproject.toml",
                 "wasm_runner/_runtimes/requirements.lock", "requirements/test.lock",
                 "wasm_runner/_runtimes/python/manifest.toml",
                 "wasm_runner/__init__.py", "wasm_runner_server/__init__.py",
                 "wasm-runner-client/wasm_runner_client/__init__.py"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", PYTHON), ("wasm-runner", STEP.format(name="wasm-runner")),
                       ("apt-get", STEP.format(name="apt-get"))):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STEPS_LOG": str(tmp_path / "steps.log"),
           "WASM_RUNNER_CACHE": str(tmp_path / "cache"),
           # the checkout's own packages are the installed ones (as after its editable install)
           "PYTHONPATH": f"{root}:{root / 'wasm-runner-client'}"}
    return root, env


def install(root: Path, env: dict[str, str]) -> list[str]:
    """Run scripts/install; the steps it took."""
    log = Path(env["STEPS_LOG"])
    log.unlink(missing_ok=True)
    subprocess.run(["bash", str(root / "scripts" / "install")], env=env, check=True, timeout=60,
                   capture_output=True)
    return log.read_text().splitlines() if log.exists() else []


def test_a_second_install_with_nothing_changed_takes_no_step(tmp_path):
    root, env = checkout(tmp_path)
    first = install(root, env)
    assert any(step.startswith("python3 -m pip") for step in first)
    assert "wasm-runner prepare" in first and "install-native.sh " in first
    assert install(root, env) == []


def test_an_edited_source_a_changed_manifest_or_an_emptied_cache_redo_the_steps(tmp_path):
    root, env = checkout(tmp_path)
    install(root, env)
    source = root / "wasm_runner" / "__init__.py"
    source.write_text("VERSION = 2\n")
    marker = root / ".install-ready"
    os.utime(marker, (marker.stat().st_atime, source.stat().st_mtime - 5))  # edited after the install
    redone = install(root, env)
    assert any(step.startswith("python3 -m compileall") for step in redone)
    assert not any(step.startswith("python3 -m pip") for step in redone)  # pip keeps its own stamp
    assert install(root, env) == []

    (root / "wasm_runner" / "_runtimes" / "python" / "manifest.toml").write_text("version = 2\n")
    assert "wasm-runner prepare" in install(root, env)

    cache = Path(env["WASM_RUNNER_CACHE"])
    cache.mkdir()
    (cache / "compiled.cwasm").write_bytes(b"")
    install(root, env)
    (cache / "compiled.cwasm").unlink()
    assert "wasm-runner prepare" in install(root, env)


def test_an_interrupted_install_leaves_no_marker(tmp_path):
    root, env = checkout(tmp_path)
    (Path(env["PATH"].split(":")[0]) / "wasm-runner").write_text("#!/bin/sh\nexit 3\n")
    result = subprocess.run(["bash", str(root / "scripts" / "install")], env=env, timeout=60, capture_output=True)
    assert result.returncode == 3
    assert not (root / ".install-ready").exists()
