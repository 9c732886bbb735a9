"""Where a session's files and kernel images are kept: the node's disk alone, or object storage too.

`LocalStorage` is the default: the session's directory is all there is, and nothing is stored
elsewhere. `ObjectStorage` stores each generation of the directory in an S3 bucket:

- a file is stored as fixed-size chunks, each keyed by its SHA-256 under the session's own prefix
  (`sessions/<id>/chunks/<sha256>`: no chunk is shared between sessions, so deleting a session is
  deleting its prefix, and no workspace can learn what another stored);
- a save uploads only what changed: files whose size, mtime, ctime and inode are what the last save or
  restore saw keep their chunks without being read, and a chunk already stored is not sent again;
- the generation's manifest is written last, with a conditional put: a generation is written once,
  and a second writer of it is refused (`GenerationTaken`).

The guest's /tmp (`tmp/`) is not stored. The names in a manifest are checked before a restore makes
anything of them, links are made last and never followed, and a chunk's digest is checked when read.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import mmap
import os
import secrets
import stat
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wasm_runner.snapshots.image import piece_bounds
from wasm_runner.snapshots.store import SUFFIX as IMAGE_SUFFIX
from wasm_runner.workspace.history import HISTORY_DIR
from wasm_runner.workspace.layout import discard_tree
from wasm_runner_server.storage.errors import AlreadyExists, GenerationTaken, StorageError
from wasm_runner_server.storage.manifest import (
    FORMAT,
    Entry,
    Manifest,
    checked_path,
    chunk_key,
    decode,
    encode,
    manifest_key,
    session_prefix,
)
from wasm_runner_server.storage.settings import StorageSettings

if TYPE_CHECKING:
    from wasm_runner_server.storage.objects import Objects

__all__ = ["GenerationTaken", "LocalStorage", "ObjectStorage", "SaveStats", "SessionStorage", "StorageError",
           "open_storage"]

COLLECT_GRACE_S = 600.0
"""A chunk unnamed by any manifest is deleted only once it is this old: another writer of the session (a
node that took it over) may have sent it and not yet written the manifest that names it."""
RESTORE_LEFTOVERS = (".restoring-", ".replaced-")
"""What a restore names its staging directory and the directory it replaces, beside the session's: a crash
may leave them."""
SKIPPED_TOP = frozenset({"tmp"})
"""Top-level entries of a session's directory that are not stored (the guest's /tmp)."""


@dataclass
class SaveStats:
    generation: int = 0
    files: int = 0
    chunks_uploaded: int = 0
    bytes_uploaded: int = 0
    stored_bytes: int = 0
    """The generation's file bytes but its file history's: what the workspace's disk quota counts of it."""
    seconds: float = 0.0


class SessionStorage(Protocol):
    """What the service asks of the place sessions are stored."""

    @property
    def durable(self) -> bool:
        """Whether sessions are stored beyond this node (and so can move)."""
        ...

    def save(self, session_id: str, root: Path, *, generation: int, epoch: int, node: str) -> SaveStats: ...
    def restore(self, session_id: str, root: Path, generation: int) -> SaveStats: ...
    def remove(self, session_id: str) -> None: ...
    def collect(self, session_id: str, committed: int) -> int: ...
    def forget(self, session_id: str) -> None:
        """Drop what this node knew of the session's stored state (it went to another node)."""
        ...
    def close(self) -> None: ...


class LocalStorage:
    """The node's disk only: the session's directory is its state."""

    durable = False

    def save(self, session_id: str, root: Path, *, generation: int, epoch: int, node: str) -> SaveStats:
        return SaveStats(generation)

    def restore(self, session_id: str, root: Path, generation: int) -> SaveStats:
        return SaveStats(generation)

    def remove(self, session_id: str) -> None:
        pass

    def collect(self, session_id: str, committed: int) -> int:
        return 0

    def forget(self, session_id: str) -> None:
        pass

    def close(self) -> None:
        pass


_StatKey = tuple[int, int, int, int]


@dataclass
class _Known:
    """What this node knows to be stored for one session."""

    files: dict[str, tuple[_StatKey, Entry]] = field(default_factory=dict)
    chunks: set[str] = field(default_factory=set)


def _stat_key(st: os.stat_result) -> _StatKey:
    # ctime too: a guest can set a file's mtime back, not its ctime
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


class ObjectStorage:
    """Sessions stored in an S3 bucket or a shared directory (see the module's docstring)."""

    durable = True

    def __init__(self, settings: StorageSettings, objects: Objects | None = None) -> None:
        self.settings = settings
        if objects is None:
            from wasm_runner_server.storage.objects import open_objects  # the cluster extra's obstore

            objects = open_objects(settings)
        self.objects = objects
        self.chunk_bytes = settings.chunk_bytes
        self._pool = ThreadPoolExecutor(max_workers=settings.upload_threads, thread_name_prefix="storage-io")
        self._known: dict[str, _Known] = {}
        self._session_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    # -- save ---------------------------------------------------------------------------------

    def save(self, session_id: str, root: Path, *, generation: int, epoch: int, node: str) -> SaveStats:
        """Store the session's directory as `generation` (GenerationTaken: it is stored already)."""
        with self._session_lock(session_id):  # not while its stored objects are collected
            return self._save(session_id, root, generation, epoch, node)

    def _save(self, session_id: str, root: Path, generation: int, epoch: int, node: str) -> SaveStats:
        started = time.perf_counter()
        with self._lock:
            known = self._known.get(session_id) or _Known()
        stats = SaveStats(generation)
        entries: list[Entry] = []
        files: dict[str, tuple[_StatKey, Entry]] = {}
        chunks = set(known.chunks)
        pending: deque[Future[int]] = deque()

        def upload(digest: str, data: bytes) -> int:
            try:
                self.objects.put_new(chunk_key(session_id, digest), data)
            except AlreadyExists:
                return 0  # content-addressed: the same bytes are there
            return len(data)

        def drain(down_to: int) -> None:
            while len(pending) > down_to:
                sent = pending.popleft().result()
                if sent:
                    stats.chunks_uploaded += 1
                    stats.bytes_uploaded += sent

        try:
            for rel, st in _walk(root):
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISDIR(st.st_mode):
                    entries.append(Entry(rel, "dir", mode))
                elif stat.S_ISLNK(st.st_mode):
                    entries.append(Entry(rel, "link", target=os.readlink(root / rel)))
                else:
                    key = _stat_key(st)
                    seen = known.files.get(rel)
                    if seen is not None and seen[0] == key:
                        entry = seen[1]
                    else:
                        digests = []
                        for data in _chunks(root / rel, self.chunk_bytes):
                            digest = hashlib.sha256(data).hexdigest()
                            digests.append(digest)
                            if digest not in chunks:
                                chunks.add(digest)
                                pending.append(self._pool.submit(upload, digest, data))
                                drain(2 * self.settings.upload_threads)  # a bounded number of chunks in memory
                        entry = Entry(rel, "file", mode, st.st_size, st.st_mtime_ns, tuple(digests))
                    files[rel] = (key, entry)
                    entries.append(entry)
                    stats.files += 1
                    if not rel.startswith(HISTORY_DIR + "/"):
                        stats.stored_bytes += st.st_size
            drain(0)
        finally:
            for future in pending:
                future.cancel()
        manifest = Manifest(FORMAT, session_id, generation, epoch, node, self.chunk_bytes, tuple(entries))
        try:
            self.objects.put_new(manifest_key(session_id, generation), encode(manifest))
        except AlreadyExists:
            raise GenerationTaken(f"generation {generation} of session {session_id!r} is stored already") from None
        with self._lock:
            self._known[session_id] = _Known(files, chunks)
        stats.seconds = time.perf_counter() - started
        return stats

    # -- restore ------------------------------------------------------------------------------

    def restore(self, session_id: str, root: Path, generation: int) -> SaveStats:
        """Make `root` the session's directory as stored in `generation` (0: an empty one); whatever was
        at `root` is replaced."""
        started = time.perf_counter()
        stats = SaveStats(generation)
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = root.parent / f"{RESTORE_LEFTOVERS[0]}{session_id}-{secrets.token_hex(4)}"
        staging.mkdir(mode=0o700)
        known = _Known()
        try:
            if generation > 0:
                manifest = decode(self.objects.get(manifest_key(session_id, generation)))
                if manifest.session != session_id or manifest.generation != generation:
                    raise StorageError(f"the manifest of generation {generation} names another session or generation")
                known = self._lay_out(session_id, manifest, staging, stats)
            if root.exists() or root.is_symlink():
                old = root.parent / f"{RESTORE_LEFTOVERS[1]}{session_id}-{secrets.token_hex(4)}"
                os.rename(root, old)
                self._pool.submit(discard_tree, old)
            os.rename(staging, root)
        except BaseException:
            discard_tree(staging)
            raise
        for rel, (_, entry) in list(known.files.items()):  # what the next save need not read again
            known.files[rel] = (_stat_key(os.lstat(root / rel)), entry)
        with self._lock:
            self._known[session_id] = known
        stats.seconds = time.perf_counter() - started
        return stats

    def _lay_out(self, session_id: str, manifest: Manifest, staging: Path, stats: SaveStats) -> _Known:
        known = _Known(chunks=manifest.chunk_digests())
        dirs = sorted((e for e in manifest.entries if e.kind == "dir"), key=lambda e: e.path.count("/"))
        for entry in dirs:
            if entry.path.split("/")[0] in SKIPPED_TOP:
                continue
            (staging / checked_path(entry.path)).mkdir(mode=0o700, exist_ok=True)

        def fetch(digest: str) -> bytes:
            data = self.objects.get(chunk_key(session_id, digest))
            if hashlib.sha256(data).hexdigest() != digest:
                raise StorageError(f"a chunk of session {session_id!r} does not match its digest")
            return data

        for entry in manifest.entries:
            if entry.kind != "file":
                continue
            path = staging / checked_path(entry.path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                for data in self._pool.map(fetch, entry.chunks):
                    os.write(fd, data)
                    stats.bytes_uploaded += len(data)
                os.fchmod(fd, entry.mode & 0o777)  # never setuid/setgid bits from storage
            finally:
                os.close(fd)
            os.utime(path, ns=(entry.mtime_ns, entry.mtime_ns), follow_symlinks=False)
            known.files[entry.path] = ((0, 0, 0, 0), entry)
            stats.files += 1
        for entry in manifest.entries:  # links last: nothing is written through one
            if entry.kind == "link":
                os.symlink(entry.target, staging / checked_path(entry.path))
        for entry in reversed(dirs):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(staging / entry.path, (entry.mode & 0o777) | 0o700, follow_symlinks=False)
        return known

    # -- collection ---------------------------------------------------------------------------

    def collect(self, session_id: str, committed: int) -> int:
        """Delete what no generation from `committed` on needs: the older manifests, and the chunks no
        remaining manifest names that were written over COLLECT_GRACE_S ago (a chunk a writer has sent
        and not yet named in its manifest is younger). Holds the session's saves meanwhile; returns how
        many objects were deleted."""
        with self._session_lock(session_id):
            listing = list(self.objects.listing(session_prefix(session_id)))
            manifests = {key: int(key.rsplit("/", 1)[1]) for key, _ in listing if "/manifests/" in key}
            kept: set[str] = set()
            for key, generation in manifests.items():
                if generation >= committed:
                    kept |= decode(self.objects.get(key)).chunk_digests()
            cutoff = time.time() - COLLECT_GRACE_S
            dead = [digest for key, written in listing if "/chunks/" in key
                    and (digest := key.rsplit("/", 1)[1]) not in kept and written < cutoff]
            doomed = [key for key, generation in manifests.items() if generation < committed]
            doomed += [chunk_key(session_id, digest) for digest in dead]
            with self._lock:
                known = self._known.get(session_id)
                if known is not None:  # the next save sends these again if it needs them
                    known.chunks.difference_update(dead)
            for start in range(0, len(doomed), 1000):
                self.objects.delete(doomed[start:start + 1000])
            return len(doomed)

    def _session_lock(self, session_id: str) -> threading.Lock:
        with self._lock:
            return self._session_locks.setdefault(session_id, threading.Lock())

    # -- removal ------------------------------------------------------------------------------

    def remove(self, session_id: str) -> None:
        """Delete everything stored for the session."""
        with self._lock:
            self._known.pop(session_id, None)
            self._session_locks.pop(session_id, None)
        keys = list(self.objects.keys(session_prefix(session_id)))
        for start in range(0, len(keys), 1000):
            self.objects.delete(keys[start:start + 1000])

    def forget(self, session_id: str) -> None:
        """Drop what this node knew of the session's stored state (it went to another node)."""
        with self._lock:
            self._known.pop(session_id, None)
            self._session_locks.pop(session_id, None)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _walk(root: Path):
    """(relative path, lstat) of every entry under `root`, links not followed, `SKIPPED_TOP` left out."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            names = sorted(os.listdir(root / rel_dir) if rel_dir else os.listdir(root))
        except FileNotFoundError:
            continue
        for name in names:
            if not rel_dir and name in SKIPPED_TOP:
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                st = os.lstat(root / rel)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                yield rel, st
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                yield rel, st
            # sockets, fifos, devices: not stored


def _chunks(path: Path, size: int):
    """The file's bytes in chunks of `size`; a kernel image's cut where its memory regions change, so that
    the regions a call left alone keep their chunks (`image.piece_bounds`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        length = os.fstat(fd).st_size
        if path.suffix == IMAGE_SUFFIX and length:
            with mmap.mmap(fd, length, prot=mmap.PROT_READ) as mapped:
                bounds = piece_bounds(mapped, size)
                if bounds is not None:
                    for start, end in itertools.pairwise(bounds):
                        for at in range(start, end, size):  # (the page table of a vast memory: several)
                            yield mapped[at:min(at + size, end)]
                    return
        while True:
            data = os.read(fd, size)
            if not data:
                return
            while len(data) < size:  # os.read may return less than asked before the end
                more = os.read(fd, size - len(data))
                if not more:
                    break
                data += more
            yield data
    finally:
        os.close(fd)


def open_storage(settings: StorageSettings) -> SessionStorage:
    """The storage `[storage]` configures."""
    settings = settings.with_environment()
    return ObjectStorage(settings) if settings.objects else LocalStorage()
