"""Session directories: layout, usage against quotas, and what changed in a call.

Host code here never follows a symlink inside a session directory: a guest can
create links pointing anywhere, so every walk uses lstat semantics.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .api import FileChanges

Snapshot = dict[str, tuple[int, int]]
"""relative path -> (size, mtime_ns) of every entry, links not followed."""


@dataclass(frozen=True)
class Workspace:
    """A session's directory: `files/` is the guest's /workspace, `tmp/` its /tmp.

    `files_dir` puts /workspace on an existing directory instead (the CLI's --workspace).
    """

    root: Path
    files_dir: Path | None = None

    @cached_property
    def files(self) -> Path:
        return self.files_dir or self.root / "files"

    @cached_property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def ensure(self) -> "Workspace":
        self.files.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
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
        if self.files_dir is None:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def scan(self) -> tuple[Snapshot, int, int]:
        """One pass over the session: the snapshot of files/, and the (bytes, entries) used by
        files/ and tmp/ together."""
        files, used_bytes, entries = _scan(self.files)
        _, tmp_bytes, tmp_entries = _scan(self.tmp)
        return files, used_bytes + tmp_bytes, entries + tmp_entries

    def snapshot(self) -> Snapshot:
        return _scan(self.files)[0]

    def usage(self, stop_after_files: int | None = None) -> tuple[int, int]:
        """(bytes, entries) used by files/ and tmp/; counting stops early past `stop_after_files`.

        Bytes are apparent sizes, so a sparse file counts in full against the quota."""
        total_bytes = total_entries = 0
        for top in (self.files, self.tmp):
            for entry in _walk(top):
                st = _lstat(entry)
                if st is None:
                    continue
                total_entries += 1
                if stat.S_ISREG(st.st_mode):
                    total_bytes += st.st_size
                if stop_after_files is not None and total_entries > stop_after_files:
                    return total_bytes, total_entries
        return total_bytes, total_entries


def _walk(top: Path):
    stack = [str(top)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    yield entry
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue


def _lstat(entry: os.DirEntry) -> os.stat_result | None:
    """The entry's own metadata, or None when it vanished since it was listed (a guest
    may delete files while the quota watcher counts them)."""
    try:
        return entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None


def _scan(top: Path) -> tuple[Snapshot, int, int]:
    base = len(str(top)) + 1
    files: Snapshot = {}
    used = entries = 0
    for entry in _walk(top):
        st = _lstat(entry)
        if st is None:
            continue
        entries += 1
        if stat.S_ISDIR(st.st_mode):
            continue
        files[entry.path[base:]] = (st.st_size, st.st_mtime_ns)
        if stat.S_ISREG(st.st_mode):
            used += st.st_size
    return files, used, entries


def diff(before: Snapshot, after: Snapshot) -> FileChanges:
    created = sorted(p for p in after if p not in before)
    deleted = sorted(p for p in before if p not in after)
    modified = sorted(p for p, meta in after.items() if p in before and before[p] != meta)
    return FileChanges(created=created, modified=modified, deleted=deleted)
