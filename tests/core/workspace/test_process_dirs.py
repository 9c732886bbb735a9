"""Directories made for a process's life (the sandbox's /etc copy, kernel slots, relay points) go
with the process however it ends: a SIGKILLed worker's are removed by the next process to make
its own, a living process's are never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from wasm_runner.workspace.process_dirs import ROOT_PREFIX

MAKE = """
import sys, time
from wasm_runner.workspace.process_dirs import process_dir
from wasm_runner.providers.native.bwrap import etc_dir
made = [process_dir("slots", 0o755), etc_dir()]
for path in made:
    (path / "kept").write_text("x")
print(*made, flush=True)
if sys.argv[1] == "wait":
    time.sleep(60)
"""


def _start(tmp: Path, mode: str) -> tuple[subprocess.Popen[str], list[Path]]:
    process = subprocess.Popen([sys.executable, "-c", MAKE, mode], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp)})
    assert process.stdout is not None
    return process, [Path(p) for p in process.stdout.readline().split()]


def _roots(tmp: Path) -> set[str]:
    return {p.name for p in tmp.iterdir() if p.name.startswith(ROOT_PREFIX)}


def test_a_killed_process_directories_are_removed_by_the_next_and_a_living_ones_kept(tmp_path):
    killed, killed_dirs = _start(tmp_path, "wait")
    living, living_dirs = _start(tmp_path, "wait")
    try:
        assert all(p.is_dir() and p.parent.parent == tmp_path for p in killed_dirs + living_dirs)
        assert killed_dirs[0].parent == killed_dirs[1].parent  # one root per process
        assert oct(killed_dirs[1].stat().st_mode & 0o777) == "0o755"  # the sandbox user reads its /etc
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert all(p.is_dir() for p in killed_dirs)  # no exit hook ran

        later, _ = _start(tmp_path, "exit")
        assert later.wait() == 0
        assert not killed_dirs[0].parent.exists()
        assert all((p / "kept").is_file() for p in living_dirs)
    finally:
        living.kill()
        living.wait()


def test_a_process_that_exits_removes_its_own_root(tmp_path):
    process, dirs = _start(tmp_path, "exit")
    assert process.wait() == 0
    assert not dirs[0].parent.exists()
    assert _roots(tmp_path) == set()
