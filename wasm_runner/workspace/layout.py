"""Session directories: layout, usage against quotas, and what changed in a call.

Host code here never follows a symlink inside a session directory: a guest can
create links pointing anywhere, so every walk uses lstat semantics. Walks open each
directory relative to its parent's descriptor and keep their own stack: a guest can
build trees deeper and with longer paths than the kernel accepts in one path.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from wasm_runner.errors import WasmRunnerError
from wasm_runner_protocol.execution import FileChanges
from wasm_runner_protocol.guest import GUEST_WORKSPACE, check_guest_path

log = logging.getLogger("wasm_runner")

Snapshot = dict[str, tuple[int, int]]
"""relative path -> (size, mtime_ns) of every entry, links not followed."""


@dataclass(frozen=True)
class Workspace:
    """A session's directory: `files/` is the guest's /workspace, `tmp/` its /tmp.

    `files_dir` puts /workspace on an existing directory instead (the CLI's --workspace, or a
    member's disk that several sessions share); `workdir` is the guest's working directory
    relative to /workspace ("" for /workspace itself), made by `ensure`; `guest_root` is where the
    guest finds it from: /workspace, or another path the same directory is shown at (a disk layout's
    own path, e.g. /home/user/workspace, mounted as an alias).
    """

    root: Path
    files_dir: Path | None = None
    workdir: str = ""
    guest_root: str = GUEST_WORKSPACE

    def __post_init__(self) -> None:
        check_workdir(self.workdir)
        if self.guest_root != GUEST_WORKSPACE:
            check_guest_path(self.guest_root)

    @property
    def guest_cwd(self) -> str:
        """The guest's working directory (an absolute guest path)."""
        return f"{self.guest_root}/{self.workdir}" if self.workdir else self.guest_root

    @cached_property
    def files(self) -> Path:
        return self.files_dir or self.root / "files"

    @cached_property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @cached_property
    def internal(self) -> Path:
        """What the service keeps for the session's own use (its native venv): beside files/, so kept,
        forked and counted with the session, and never among the user's files."""
        return self.root / "internal"

    def _counted(self) -> tuple[Path, ...]:
        return (self.files, self.tmp, self.internal) if self.internal.is_dir() else (self.files, self.tmp)

    def ensure(self) -> Workspace:
        self.files.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        if self.workdir:
            make_workdir(self.files, self.workdir)
        return self

    def is_empty(self) -> bool:
        for top in (self.files, self.tmp):
            try:
                with os.scandir(top) as it:
                    if next(it, None) is not None:
                        return False
            except FileNotFoundError:
                return False
        return True

    def remove(self) -> None:
        """Remove the session's directory (never a `files_dir` the caller brought)."""
        remove_tree(self.root if self.files_dir is None else self.tmp)

    def scan(self) -> tuple[Snapshot, int, int]:
        """One pass over the session: the snapshot of files/, and the (bytes, entries) used by
        files/, tmp/ and internal/ together."""
        files, used_bytes, entries = _scan(self.files)
        for other in self._counted()[1:]:
            _, more_bytes, more_entries = _scan(other)
            used_bytes, entries = used_bytes + more_bytes, entries + more_entries
        return files, used_bytes, entries

    def snapshot(self) -> Snapshot:
        return _scan(self.files)[0]

    def snapshot_before_run(self) -> Snapshot:
        """The snapshot a run's changes are computed from; empty when the workspace cannot be
        measured (the run goes on to be stopped as over quota by the quota watcher)."""
        try:
            return self.snapshot()
        except OSError:
            log.warning("could not measure %s before a run", self.root, exc_info=True)
            return {}

    def usage(self, stop_after_files: int | None = None) -> tuple[int, int]:
        """(bytes, entries) used by files/, tmp/ and internal/; counting stops early past `stop_after_files`.

        Bytes are apparent sizes, so a sparse file counts in full against the quota. Raises
        OSError when usage cannot be measured."""
        return tree_usage(self._counted(), stop_after_files)


WORKDIR_PART = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")


def check_workdir(workdir: str) -> str:
    """`workdir` if it is "" or '/'-separated names of 1-64 letters, digits, '-' or '_' (so never
    '..', '.', an absolute path or an empty part); ValueError otherwise."""
    if workdir and not all(WORKDIR_PART.match(part) for part in workdir.split("/")):
        raise ValueError(f"a working directory is '/'-separated names of 1-64 letters, digits, '-' or '_' "
                         f"(got {workdir!r})")
    return workdir


def make_workdir(files: Path, workdir: str) -> None:
    """Make `workdir` under `files`, one part at a time relative to its parent's descriptor, never
    following a link: the guest may have put one where a part of it goes."""
    fd = os.open(files, DIR_FLAGS & ~os.O_NOFOLLOW)  # files/ itself is the host's choice
    try:
        for part in workdir.split("/"):
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            child = os.open(part, DIR_FLAGS, dir_fd=fd)  # ELOOP/ENOTDIR on a link or a file: refused
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NAMED_PATH_CHARS = 4096
"""Walks name entries up to this path length (what the file API addresses); deeper ones are
counted but not named, so a deep tree costs memory linear in its size, not quadratic."""
HELD_DESCRIPTORS = 64
"""Directory descriptors a walk keeps open; deeper ancestors are closed and reopened
through `..` (their identity checked), so no depth runs out of descriptors."""


class TreeChanged(WasmRunnerError, OSError):
    """A directory moved while a walk was inside it: the walk cannot tell what it has counted."""


@dataclass
class _Frame:
    name: str
    prefix: str | None
    identity: tuple[int, int]
    fd: int
    subdirs: list[str] | None = None


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry's own metadata, or None when it vanished since it was listed (a guest
    may delete files while the quota watcher counts them)."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _open_subdir(dir_fd: int, name: str) -> int | None:
    """A descriptor of the subdirectory `name`; None when it vanished or stopped being one."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # replaced by a link meanwhile: never followed
            return None
        raise


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def walk_tree(top: str | os.PathLike[str] | None = None, *, dir_fd: int | None = None,
              on_leave: Callable[[int, str], None] | None = None, paths: bool = True,
              ) -> Iterator[tuple[int, str, str, os.stat_result]]:
    """(parent descriptor, name, relative path, lstat) of every entry under `top`, links never
    followed; a directory's entries come before those of its subdirectories.

    Iterative and descriptor-based: names are opened relative to their parent's descriptor,
    so neither depth nor total path length is limited. `on_leave(parent_fd, name)` runs once
    a subdirectory is done (remove_tree removes it there). A missing `top` is an empty tree;
    every other failure raises: a caller counting usage must not count less than there is.
    The relative path is "" with `paths=False`, and past NAMED_PATH_CHARS."""
    # A top the host names by path may be a link it chose (e.g. the CLI's --workspace); a name
    # relative to a descriptor is inside an untrusted tree and never followed.
    flags = DIR_FLAGS if dir_fd is not None else DIR_FLAGS & ~os.O_NOFOLLOW
    try:
        root = os.open(top if top is not None else ".", flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    stack = [_Frame("", "" if paths else None, _identity(root), root)]
    lowest_open = 0  # the open descriptors are those of stack[lowest_open:]
    try:
        while stack:
            frame = stack[-1]
            if frame.subdirs is None:
                frame.subdirs = []
                with os.scandir(frame.fd) as it:
                    names = [entry.name for entry in it]
                for name in names:
                    st = _lstat_at(frame.fd, name)
                    if st is None:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        frame.subdirs.append(name)
                    yield frame.fd, name, frame.prefix + name if frame.prefix is not None else "", st
                continue
            if frame.subdirs:
                name = frame.subdirs.pop()
                fd = _open_subdir(frame.fd, name)
                if fd is None:
                    continue
                prefix = frame.prefix + name + "/" if frame.prefix is not None else None
                if prefix is not None and len(prefix) > NAMED_PATH_CHARS:
                    prefix = None
                stack.append(_Frame(name, prefix, _identity(fd), fd))
                if len(stack) - lowest_open > HELD_DESCRIPTORS:
                    os.close(stack[lowest_open].fd)
                    stack[lowest_open].fd = -1
                    lowest_open += 1
                continue
            stack.pop()
            try:
                if stack and stack[-1].fd < 0:  # reopen the parent through "..", if it still is
                    fd = os.open("..", DIR_FLAGS, dir_fd=frame.fd)
                    if _identity(fd) != stack[-1].identity:
                        os.close(fd)
                        raise TreeChanged(errno.ESTALE, "a directory moved while it was walked")
                    stack[-1].fd = fd
                    lowest_open -= 1
            finally:
                os.close(frame.fd)
                frame.fd = -1
            if stack and on_leave is not None:
                on_leave(stack[-1].fd, frame.name)
    finally:
        for frame in stack:
            if frame.fd >= 0:
                os.close(frame.fd)


def remove_tree(path: str | os.PathLike[str], *, dir_fd: int | None = None, missing_ok: bool = True) -> None:
    """Remove a directory and everything under it, never following a link, at any depth or
    path length (shutil.rmtree recurses once per level and fails on deep trees)."""

    def rmdir(parent_fd: int, name: str) -> None:
        os.rmdir(name, dir_fd=parent_fd)

    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path, dir_fd=dir_fd)
        return
    for parent_fd, name, _, entry in walk_tree(path, dir_fd=dir_fd, on_leave=rmdir, paths=False):
        if not stat.S_ISDIR(entry.st_mode):
            try:
                os.unlink(name, dir_fd=parent_fd)
            except FileNotFoundError:
                pass
    os.rmdir(path, dir_fd=dir_fd)


def discard_tree(path: str | os.PathLike[str]) -> bool:
    """remove_tree for clean-ups that must go on: False (and a warning) when it failed."""
    try:
        remove_tree(path)
        return True
    except OSError:
        log.warning("could not remove %s", path, exc_info=True)
        return False


def _scan(top: Path) -> tuple[Snapshot, int, int]:
    files: Snapshot = {}
    used = entries = 0
    for _, _, rel, st in walk_tree(top):
        entries += 1
        if stat.S_ISDIR(st.st_mode):
            continue
        if stat.S_ISREG(st.st_mode):
            used += st.st_size
        if rel:  # unnamed past NAMED_PATH_CHARS: counted, not listed
            files[rel] = (st.st_size, st.st_mtime_ns)
    return files, used, entries


def tree_usage(tops: Iterable[str | os.PathLike[str]], stop_after_files: int | None = None) -> tuple[int, int]:
    """(bytes, entries) under the directories `tops`; counting stops early past `stop_after_files`.

    Bytes are apparent sizes, so a sparse file counts in full against the quota. Raises
    OSError when the trees cannot be measured (callers fail closed)."""
    total_bytes = total_entries = 0
    for top in tops:
        for _, _, _, st in walk_tree(top, paths=False):
            total_entries += 1
            if stat.S_ISREG(st.st_mode):
                total_bytes += st.st_size
            if stop_after_files is not None and total_entries > stop_after_files:
                return total_bytes, total_entries
    return total_bytes, total_entries


def diff(before: Snapshot, after: Snapshot) -> FileChanges:
    created = sorted(p for p in after if p not in before)
    deleted = sorted(p for p in before if p not in after)
    modified = sorted(p for p, meta in after.items() if p in before and before[p] != meta)
    return FileChanges(created=created, modified=modified, deleted=deleted)
