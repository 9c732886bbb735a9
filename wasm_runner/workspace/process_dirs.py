"""Host directories that live exactly as long as the process that made them.

A worker killed at its deadline, or a service stopped with SIGKILL, runs no `atexit` hook, so a
directory removed only there (the sandbox's /etc copy, the kernel slots, the relay points, the
proxy's socket directories) stays in the system's temporary directory for ever, about 1 MB per
worker replaced. Here each process makes its directories under one root of its own, holding an
exclusive `flock` on the root's lock file for its whole life: the kernel releases that lock when
the process ends, however it ends, and the next process to make a root removes every root whose
lock it can take.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import tempfile
import threading
import time
from pathlib import Path

from wasm_runner.workspace.layout import discard_tree

ROOT_PREFIX = "wasm-runner-proc-"
LOCK_NAME = ".lock"
UNLOCKED_GRACE_S = 60.0
"""A root younger than this without its lock file is being made by another process: left alone."""

_lock = threading.Lock()
_root: Path | None = None
_owner: int | None = None
_lock_fd: int | None = None


def process_dir(prefix: str, mode: int = 0o700) -> Path:
    """A new directory named `prefix`-… under this process's root, removed when the process ends
    (at exit, or by the next process's sweep when it was killed)."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=_own_root()))
    path.chmod(mode)
    return path


def _own_root() -> Path:
    global _root, _owner, _lock_fd
    with _lock:
        if _root is not None and _owner == os.getpid() and _root.is_dir():
            return _root
        parent = Path(tempfile.gettempdir())
        sweep(parent)
        root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=parent))
        root.chmod(0o755)  # sandboxes walk through it to the directories bound from here
        fd = os.open(root / LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _lock_fd is not None and _owner == os.getpid():
            os.close(_lock_fd)  # an earlier root of this process, removed under it
        _root, _owner, _lock_fd = root, os.getpid(), fd
        return root


def sweep(parent: Path) -> int:
    """Remove the roots under `parent` whose process has ended; how many were removed."""
    removed = 0
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(ROOT_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(os.path.join(entry.path, LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            try:
                young = time.time() - entry.stat(follow_symlinks=False).st_mtime < UNLOCKED_GRACE_S
            except OSError:
                continue
            if not young:
                removed += discard_tree(entry.path)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            removed += discard_tree(entry.path)
        except OSError:
            pass  # locked: its process lives
        finally:
            os.close(fd)
    return removed


@atexit.register
def _remove_own_root() -> None:
    # A forked child inherits this hook and the root's path: only the process that made it removes it.
    if _root is not None and _owner == os.getpid():
        discard_tree(_root)
