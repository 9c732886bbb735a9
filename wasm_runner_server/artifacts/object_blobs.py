"""Artifact bytes in the object store a cluster's nodes share (`[storage]`: S3 or a shared directory), so
that an artifact published through one node downloads through any.

A blob is `artifacts/<sha256>`. It is written through a local staging file (the digest names it, so the
bytes are read once, hashed and bounded on the way) and uploaded, replacing any copy: an upload refreshes
the blob's time. Deleting is never immediate: between one node's check that no artifact names a blob and
its delete, another node may publish the same bytes. The blobs no artifact names are deleted by `orphans`'
caller once they are older than `ORPHAN_GRACE_S`, which no publish takes.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from wasm_runner_server.artifacts.storage import CHUNK, BlobStorage, checked_digest, is_digest, write_hashed
from wasm_runner_server.storage.errors import ObjectMissing
from wasm_runner_server.storage.objects import Objects

PREFIX = "artifacts/"
ORPHAN_GRACE_S = 3600.0
"""An unnamed blob is deleted once it was last written this long ago: far longer than a publish takes."""


class ObjectBlobStorage(BlobStorage):
    deferred_delete = True

    def __init__(self, objects: Objects, staging: Path) -> None:
        self.objects = objects
        self.staging = staging
        """Where bytes wait while they are hashed (the node's disk, this service's data directory)."""
        staging.mkdir(parents=True, exist_ok=True, mode=0o700)
        for left in staging.iterdir():  # a publish a crash cut short
            left.unlink(missing_ok=True)

    def put(self, chunks: Iterable[bytes], *, max_bytes: int) -> tuple[str, int]:
        fd, name = tempfile.mkstemp(dir=self.staging)
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                sha, size = write_hashed(chunks, out, max_bytes)
            self.objects.put_file(PREFIX + sha, tmp)
            return sha, size
        finally:
            tmp.unlink(missing_ok=True)

    def open(self, digest: str) -> Iterator[bytes]:
        try:
            return self.objects.stream(PREFIX + checked_digest(digest), CHUNK)
        except ObjectMissing:
            raise FileNotFoundError(digest) from None

    def exists(self, digest: str) -> bool:
        return self.objects.exists(PREFIX + checked_digest(digest))

    def delete(self, digest: str) -> None:
        self.objects.delete([PREFIX + checked_digest(digest)])

    def orphans(self, now: float | None = None) -> Iterator[str]:
        cutoff = (now if now is not None else time.time()) - ORPHAN_GRACE_S
        for key, written in self.objects.listing(PREFIX):
            digest = key[len(PREFIX):]
            if written < cutoff and is_digest(digest):
                yield digest
