"""A result cache for batches: a verdict is reused when everything that decides it is the same.

The key is a hash of the harness, language, code, tests or cases (and their comparison),
stdin, environment, limits and the runtime that runs it (its manifest, which pins the
artifacts by sha256, and the guest-side code shipped with it), plus the wasmtime and
protocol versions. Entries are files written to a temporary name and renamed into place,
so concurrent writers (threads or processes, one directory) never expose a partial entry;
the directory is bounded by size, the least recently used entries going first.

Native runs (commands, bash, a native provider) are not cached: what decides their result
(the host's tools) is not pinned by any hash here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from pathlib import Path

import msgspec

import wasm_runner_protocol
from wasm_runner.execution.lanes import each_request
from wasm_runner.manifests import RUNTIMES_DIR
from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["ResultCache", "run_with_cache", "runtime_fingerprint"]

log = logging.getLogger("wasm_runner")

KEY_VERSION = 1
"""Bumped when what a key covers changes: older entries then simply miss."""
NOT_CACHED_ERRORS = frozenset({"HostError", "InvalidRequest", "Rejected", "RuntimeUnavailable", "GuestCrash"})
"""Results that say nothing about the item (the host failed, or it did not run)."""
RUNTIME_FILES = {
    "python": ("python",),
    "javascript": ("javascript",),
    "typescript": ("typescript", "javascript"),
}
"""Whose manifest and guest-side files decide a language's results (TypeScript runs on QuickJS)."""
STALE_TEMP_S = 3600.0
"""A temporary file this old was left by a writer that died: removed when evicting."""
HIT_BUFFER = 64
"""Cache hits held ahead of a slow consumer (the read-ahead waits beyond it)."""


@functools.cache
def runtime_fingerprint(language: str) -> str:
    """A hash of what the host knows decides a language's results: its runtime's manifest (the
    pinned artifact sha256s), the guest-side files shipped with it, wasmtime's version."""
    from wasm_runner.lowlevel import WASMTIME_VERSION

    digest = hashlib.sha256(f"{WASMTIME_VERSION}\0{wasm_runner_protocol.__version__}\0".encode())
    for name in RUNTIME_FILES.get(language, (language,)):
        directory = RUNTIMES_DIR / name
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(path.relative_to(RUNTIMES_DIR).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _cacheable_request(request: ExecRequest) -> bool:
    return (request.command is None and request.provider != "native" and request.language in RUNTIME_FILES
            and not request.typecheck)


def _cacheable_result(result: ExecResult) -> bool:
    return result.limit != "cancelled" and (result.error is None or result.error.type not in NOT_CACHED_ERRORS)


class ResultCache:
    """Results on disk under `directory`, at most about `max_bytes` of them."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = 1024 * 1024 * 1024) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.entries = self.directory / "entries"
        self.temp = self.directory / "tmp"
        self.entries.mkdir(parents=True, exist_ok=True)
        self.temp.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self.stores = 0
        self.damaged = 0
        """Entries found unreadable (and removed): none while writers only rename whole files in."""
        self._lock = threading.Lock()
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = msgspec.msgpack.Decoder(ExecResult).decode
        self._bytes = sum(size for _, size, _ in self._scan())
        """What this process believes the directory holds; other writers make it an estimate,
        and every eviction counts again."""

    def key(self, request: ExecRequest) -> str | None:
        """The hash of everything that decides the request's result (None: not cacheable)."""
        if not _cacheable_request(request):
            return None
        material = (KEY_VERSION, request.harness, request.language, request.code, request.tests,
                    [(c.stdin, c.expected, c.timeout_s) for c in request.cases], request.compare, request.tolerance,
                    request.stdin, sorted(request.env.items()), msgspec.to_builtins(request.limits),
                    msgspec.to_builtins(request.effective_egress), runtime_fingerprint(request.language))
        return hashlib.sha256(self._encode(material)).hexdigest()

    def _path(self, key: str) -> Path:
        return self.entries / key[:2] / f"{key}.msgpack"

    def get(self, request: ExecRequest) -> ExecResult | None:
        """The cached result for this request, marked `cached` and carrying its id, or None."""
        key = self.key(request)
        if key is None:
            return None
        path = self._path(key)
        try:
            data = path.read_bytes()
            result = self._decode(data)
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):  # a damaged entry: gone
            with contextlib.suppress(OSError):
                path.unlink()
            self.damaged += 1
            self.misses += 1
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: evicted last
        self.hits += 1
        result.cached = True
        result.id = request.id
        result.group = request.group
        return result

    def put(self, request: ExecRequest, result: ExecResult) -> bool:
        """Keep the result (unless it says nothing about the item); True if stored."""
        key = self.key(request)
        if key is None or not _cacheable_result(result):
            return False
        data = self._encode(msgspec.structs.replace(result, id=None, group=None, cached=False, retried=False))
        path = self._path(key)
        path.parent.mkdir(exist_ok=True)
        temp = self.temp / f"{key}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        try:
            temp.write_bytes(data)
            os.replace(temp, path)  # readers see the whole entry or none
        except OSError:
            log.warning("could not write a result cache entry in %s", self.directory, exc_info=True)
            with contextlib.suppress(OSError):
                temp.unlink()
            return False
        with self._lock:
            self.stores += 1
            self._bytes += len(data)
            over = self._bytes > self.max_bytes
        if over:
            self.evict()
        return True

    def _scan(self) -> Iterable[tuple[Path, int, float]]:
        for shard in self.entries.iterdir() if self.entries.is_dir() else ():
            try:
                listing = list(os.scandir(shard))
            except (NotADirectoryError, FileNotFoundError):
                continue
            for entry in listing:
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # evicted by another writer meanwhile
                    continue
                yield Path(entry.path), stat.st_size, stat.st_mtime

    def evict(self) -> None:
        """Remove the least recently used entries until the directory is at 90 % of its bound."""
        entries = sorted(self._scan(), key=lambda e: e[2])
        total = sum(size for _, size, _ in entries)
        target = int(self.max_bytes * 0.9)
        for path, size, _ in entries:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            total -= size
        now = time.time()
        for temp in self.temp.iterdir():
            with contextlib.suppress(OSError):
                if now - temp.stat().st_mtime > STALE_TEMP_S:
                    temp.unlink()
        with self._lock:
            self._bytes = total

    def size_bytes(self) -> int:
        return sum(size for _, size, _ in self._scan())

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "stores": self.stores, "damaged": self.damaged}


_DONE = object()


async def run_with_cache(
    requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest], cache: ResultCache,
    run: Callable[[AsyncIterator[ExecRequest]], AsyncIterator[ExecResult]],
) -> AsyncIterator[ExecResult]:
    """Results of `requests`: hits from `cache` at once, the misses through `run` (a batch that
    yields results in completion order), stored as they come. Closing it stops `run`."""
    queue: asyncio.Queue[object] = asyncio.Queue(HIT_BUFFER)
    waiting: dict[str, ExecRequest] = {}
    numbers = itertools.count()

    async def misses() -> AsyncIterator[ExecRequest]:
        async for request in each_request(requests):
            hit = cache.get(request)
            if hit is not None:
                await queue.put(hit)
                continue
            key = f"cache-{next(numbers)}"  # an item's own id may repeat; results are matched by this one
            waiting[key] = request
            yield msgspec.structs.replace(request, id=key)

    async def pump() -> None:
        try:
            results = run(misses())
            async with contextlib.aclosing(results):  # type: ignore[type-var]
                async for result in results:
                    request = waiting.pop(result.id or "", None)
                    if request is not None:
                        result.id = request.id
                        cache.put(request, result)
                    await queue.put(result)
            await queue.put(_DONE)
        except Exception as exc:  # noqa: BLE001 - the consumer gets it
            await queue.put(exc)

    task = asyncio.create_task(pump())
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, ExecResult)
            yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
