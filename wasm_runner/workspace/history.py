"""Earlier versions of the files written through an API, so a change can be shown as a diff.

Kept beside the session's directory, never inside what the guest sees: blobs named by their
SHA-256 (a content seen twice is stored once) and a small JSON index, written atomically.
Before an API write the host `observe`s the file: content different from the last version it
recorded was changed by something else (the guest) and becomes an `outside` version; after
the write it `record`s what the write left as an `api` version. Bounded per session: at most
`max_versions` versions and `max_bytes` of distinct content (the oldest versions go first);
a file larger than `max_file_bytes` is not kept. Reads open the file without following links
(`WorkspaceFiles`), like every other host read of a session.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from wasm_runner.errors import WasmRunnerError
from wasm_runner.workspace.file_errors import FileOpError
from wasm_runner.workspace.files import WorkspaceFiles

Source = Literal["api", "outside"]

HISTORY_DIR = "history"
"""Its folder in a session's directory, beside files/ and tmp/ (never mounted into the guest)."""
MAX_VERSIONS = 200
MAX_BYTES = 32 * 1024 * 1024
MAX_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Version:
    version: int
    """Numbered per file from 1, never reused."""
    sha256: str
    size: int
    source: Source
    method: str | None
    recorded_at: float
    seq: int
    """Order across all files of the session (the oldest is dropped first)."""


class VersionNotFoundError(WasmRunnerError, LookupError):
    pass


class FileHistory:
    """The versions of one session's files, under `root` (created on the first version)."""

    def __init__(self, root: str | os.PathLike[str], *, max_versions: int = MAX_VERSIONS, max_bytes: int = MAX_BYTES,
                 max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.root = Path(root)
        self.max_versions = max_versions
        self.max_bytes = max_bytes
        self.max_file_bytes = max_file_bytes
        self._lock = threading.Lock()
        self._files: dict[str, list[Version]] | None = None
        self._next: dict[str, int] = {}
        self._seq = 0

    # -- writing --------------------------------------------------------------------------------

    def observe(self, files: WorkspaceFiles, path: str) -> Version | None:
        """Before an API write: keep the file as it is now if the host has not seen it so (an `outside` version)."""
        return self._add(files, path, "outside", None)

    def record(self, files: WorkspaceFiles, path: str, method: str) -> Version | None:
        """After an API write: keep what it left (an `api` version)."""
        return self._add(files, path, "api", method)

    def _add(self, files: WorkspaceFiles, path: str, source: Source, method: str | None) -> Version | None:
        data = self._read(files, path)
        if data is None:
            return None
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            index = self._load()
            versions = index.setdefault(path, [])
            if versions and versions[-1].sha256 == digest:
                return None  # nothing new: the host has seen this content
            self._store_blob(digest, data)
            number = self._next.get(path, 0) + 1
            self._next[path] = number
            self._seq += 1
            version = Version(number, digest, len(data), source, method, time.time(), self._seq)
            versions.append(version)
            self._evict(index)
            self._save(index)
            return version

    def _read(self, files: WorkspaceFiles, path: str) -> bytes | None:
        try:
            return files.read_bytes(path, max_bytes=self.max_file_bytes)
        except (FileOpError, OSError):
            return None  # gone, a directory or link, or too large to keep

    def _evict(self, index: dict[str, list[Version]]) -> None:
        while True:
            everything = [v for versions in index.values() for v in versions]
            sizes = {v.sha256: v.size for v in everything}
            if len(everything) <= self.max_versions and sum(sizes.values()) <= self.max_bytes:
                return
            oldest = min(everything, key=lambda v: v.seq)
            for path, versions in list(index.items()):
                if versions and versions[0] is oldest:
                    versions.pop(0)
                    if not versions:
                        del index[path]
                    break
            if all(v.sha256 != oldest.sha256 for vs in index.values() for v in vs):
                (self.root / "blobs" / oldest.sha256).unlink(missing_ok=True)

    # -- reading --------------------------------------------------------------------------------

    def versions(self, path: str) -> list[Version]:
        with self._lock:
            return list(self._load().get(path, []))

    def read(self, path: str, version: int) -> bytes:
        with self._lock:
            found = next((v for v in self._load().get(path, []) if v.version == version), None)
        if found is None:
            raise VersionNotFoundError(f"{path!r} has no version {version} (kept: GET the history to see which are)")
        return (self.root / "blobs" / found.sha256).read_bytes()

    def current(self, files: WorkspaceFiles, path: str) -> bytes | None:
        """The file as it is now, if history would keep it."""
        return self._read(files, path)

    def diff(self, files: WorkspaceFiles, path: str, from_version: int | None, to_version: int | None, *,
             context: int = 3) -> tuple[int | None, int | None, str, bool]:
        """(from, to, unified diff, binary) between two versions, `to_version` None meaning the file now
        and `from_version` None the last version before `to`."""
        versions = self.versions(path)
        if to_version is None:
            after = self.current(files, path)
            if after is None:
                after = b""
            earlier = versions
            if versions and hashlib.sha256(after).hexdigest() == versions[-1].sha256:
                earlier = versions[:-1]  # the file now is its last version: compare with the one before
        else:
            after = self.read(path, to_version)
            earlier = [v for v in versions if v.version < to_version]
        if from_version is None:
            if not earlier:
                from_version, before = None, b""
            else:
                from_version = earlier[-1].version
                before = self.read(path, from_version)
        else:
            before = self.read(path, from_version)
        try:
            old, new = before.decode("utf-8"), after.decode("utf-8")
        except UnicodeDecodeError:
            return from_version, to_version, "", True
        label_from = f"a/{path}" if from_version is not None else "/dev/null"
        lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     label_from, f"b/{path}", n=context)
        body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
        header = f"diff --git a/{path} b/{path}\n" if body else ""
        return from_version, to_version, header + body, False

    # -- the index ------------------------------------------------------------------------------

    def _load(self) -> dict[str, list[Version]]:
        if self._files is None:
            self._files = {}
            try:
                raw = json.loads((self.root / "index.json").read_text())
            except (FileNotFoundError, ValueError):
                raw = {}
            for path, versions in raw.get("files", {}).items():
                self._files[path] = [Version(**v) for v in versions]
            self._next = dict(raw.get("next", {}))
            self._seq = int(raw.get("seq", 0))
        return self._files

    def _save(self, index: dict[str, list[Version]]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / "index.json.tmp"
        tmp.write_text(json.dumps({"files": {p: [asdict(v) for v in vs] for p, vs in index.items()},
                                   "next": self._next, "seq": self._seq}))
        tmp.replace(self.root / "index.json")

    def _store_blob(self, digest: str, data: bytes) -> None:
        blobs = self.root / "blobs"
        target = blobs / digest
        if target.exists():
            return
        blobs.mkdir(parents=True, exist_ok=True)
        tmp = blobs / f".{digest}.tmp"
        tmp.write_bytes(data)
        tmp.replace(target)
