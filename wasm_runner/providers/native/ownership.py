"""Keeping what a native sandbox can write safe to leave on the host.

`normalize(top, owner)` walks a tree the sandbox writes (its workspace, /tmp, a writable
shared/ directory) without following links and without a recursion or path-length limit
(one directory descriptor open at a time, the way back checked by inode), and on every entry:
- clears the setuid and setgid bits (no such file may survive into the data directory);
- removes device nodes (a sandbox cannot make them; anything else put there is refused);
- with `owner`, gives the entry to the sandbox's host user, so files the service wrote
  (through the API, a WebAssembly run, an upload) stay writable by the next native run.
It runs before each native run (ownership) and after it (the bits), on the host's side.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasm_runner.errors import WasmRunnerError

SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RETRIES = 3
KEEP_OPEN = 128
"""Directory levels kept open during a walk; deeper ones are found again through '..', checked."""


class TreeChanged(WasmRunnerError, OSError):
    """A directory moved while it was walked (a guest still writing): the walk starts again."""


@dataclass
class TreeReport:
    entries: int = 0
    cleared: int = 0
    """Entries whose setuid/setgid bit was cleared."""
    removed: int = 0
    """Device nodes removed."""
    chowned: int = 0


def normalize(top: Path, owner: tuple[int, int] | None = None) -> TreeReport:
    """Clear special bits, remove device nodes, and (with `owner`) chown, under `top` and on it."""
    for attempt in range(RETRIES):
        try:
            return _walk(top, owner)
        except TreeChanged:
            if attempt == RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _walk(top: Path, owner: tuple[int, int] | None) -> TreeReport:
    report = TreeReport()
    try:
        fd = os.open(top, OPEN_DIR)
    except (FileNotFoundError, NotADirectoryError):
        return report
    st = os.fstat(fd)
    _fix_open(fd, st, owner, report, usable=True)
    # Per level: its descriptor (closed past KEEP_OPEN levels, found again through ".."),
    # its identity, and the subdirectories still to visit.
    levels: list[list[Any]] = [[fd, _identity(st), _entries(fd, owner, report)]]
    try:
        while levels:
            level = levels[-1]
            if level[2]:
                name = level[2].pop()
                child = _open_subdir(name, level[0])
                if child is None:
                    continue
                if len(levels) > KEEP_OPEN:
                    os.close(level[0])
                    level[0] = None
                levels.append([child, _identity(os.fstat(child)), _entries(child, owner, report)])
                continue
            done = levels.pop()
            if levels and levels[-1][0] is None:
                parent = os.open("..", OPEN_DIR, dir_fd=done[0])
                if _identity(os.fstat(parent)) != levels[-1][1]:
                    os.close(parent)
                    raise TreeChanged(f"{top}: a directory moved during the walk")
                levels[-1][0] = parent
            os.close(done[0])
        return report
    finally:
        for level in levels:
            if level[0] is not None:
                os.close(level[0])


def _open_subdir(name: str, dir_fd: int) -> int | None:
    """The subdirectory `name` opened, or None when it is gone or no longer a directory."""
    try:
        return os.open(name, OPEN_DIR, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError:  # a non-root service's own directory, made unreadable by a guest
        return _open_own(name, dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # replaced by a link: not followed
            return None
        raise


def _open_own(name: str, dir_fd: int) -> int:
    path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        mode = stat.S_IMODE(os.fstat(path_fd).st_mode)
        os.chmod(f"/proc/self/fd/{path_fd}", mode | stat.S_IRWXU)
    finally:
        os.close(path_fd)
    return os.open(name, OPEN_DIR, dir_fd=dir_fd)


def _entries(fd: int, owner: tuple[int, int] | None, report: TreeReport) -> list[str]:
    """Fix each entry of the open directory `fd`; the names of its subdirectories."""
    subdirs = []
    with os.scandir(fd) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            report.entries += 1
            mode = st.st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                try:
                    os.unlink(entry.name, dir_fd=fd)
                    report.removed += 1
                except FileNotFoundError:
                    pass
                continue
            if stat.S_ISLNK(mode):
                if owner is not None and (st.st_uid, st.st_gid) != owner:
                    os.chown(entry.name, *owner, dir_fd=fd, follow_symlinks=False)
                    report.chowned += 1
                continue
            if stat.S_ISDIR(mode):
                subdirs.append(entry.name)
            if mode & SPECIAL_BITS or (owner is not None and (st.st_uid, st.st_gid) != owner):
                _fix(entry.name, fd, owner, report)
    return subdirs


def _fix(name: str, dir_fd: int, owner: tuple[int, int] | None, report: TreeReport) -> None:
    """Through an O_PATH descriptor: the entry itself, never what a link it became points to."""
    try:
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISLNK(st.st_mode):
            _fix_open(path_fd, st, owner, report)
    finally:
        os.close(path_fd)


def _fix_open(fd: int, st: os.stat_result, owner: tuple[int, int] | None, report: TreeReport,
              usable: bool = False) -> None:
    """Fix the entry open as `fd`; `usable` (a tree's top) also gives its owner full access."""
    via = f"/proc/self/fd/{fd}"
    if owner is not None and (st.st_uid, st.st_gid) != owner:
        os.chown(via, *owner)  # the kernel clears setuid/setgid of a regular file on chown
        report.chowned += 1
        st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    wanted = mode & ~SPECIAL_BITS
    if usable:
        wanted |= stat.S_IRWXU
    if wanted != mode:
        os.chmod(via, wanted)
        if mode & SPECIAL_BITS:
            report.cleared += 1
