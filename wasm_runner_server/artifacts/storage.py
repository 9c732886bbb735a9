"""Where artifact bytes live: a small interface, content-addressed by SHA-256, and its embedded
default on the local filesystem; `object_blobs` keeps them in a cluster's shared object store."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

CHUNK = 256 * 1024
_DIGEST = re.compile(r"[0-9a-f]{64}\Z")


def is_digest(name: str) -> bool:
    return _DIGEST.match(name) is not None


def checked_digest(name: str) -> str:
    """`name` if it is a sha256 digest (it becomes part of a path or a key); ValueError otherwise."""
    if not is_digest(name):
        raise ValueError("not a sha256 digest")
    return name


class BlobTooLargeError(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


def write_hashed(chunks: Iterable[bytes], out: BinaryIO, max_bytes: int) -> tuple[str, int]:
    """Write `chunks` to `out`; their (sha256, size). BlobTooLargeError once they pass `max_bytes`."""
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise BlobTooLargeError(max_bytes)
        digest.update(chunk)
        out.write(chunk)
    return digest.hexdigest(), size


class BlobStorage(ABC):
    deferred_delete = False
    """Whether a blob no artifact names is left to `orphans` rather than deleted at once (storage that other
    processes publish into: they may be storing the same bytes meanwhile)."""

    @abstractmethod
    def put(self, chunks: Iterable[bytes], *, max_bytes: int) -> tuple[str, int]:
        """Store the bytes; their (sha256, size). The same bytes stored twice are kept once."""

    @abstractmethod
    def open(self, digest: str) -> Iterator[bytes]:
        """The bytes of `digest`, in chunks (FileNotFoundError if absent)."""

    @abstractmethod
    def exists(self, digest: str) -> bool: ...

    @abstractmethod
    def delete(self, digest: str) -> None:
        """Forget the bytes (no error if absent)."""

    def orphans(self, now: float | None = None) -> Iterator[str]:
        """With `deferred_delete`: the blobs old enough to delete if no artifact names them."""
        return iter(())


class LocalBlobStorage(BlobStorage):
    """Blobs as files `<root>/<first 2 hex>/<sha256>`, written to a temporary name and renamed in."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        (self.root / "incoming").mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / checked_digest(digest)

    def put(self, chunks: Iterable[bytes], *, max_bytes: int) -> tuple[str, int]:
        tmp = self.root / "incoming" / secrets.token_hex(8)
        try:
            with open(tmp, "xb") as out:
                name, size = write_hashed(chunks, out, max_bytes)
            target = self._path(name)
            target.parent.mkdir(exist_ok=True)
            if target.exists():
                tmp.unlink()
            else:
                tmp.replace(target)
            return name, size
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def open(self, digest: str) -> Iterator[bytes]:
        handle = open(self._path(digest), "rb")  # noqa: SIM115 - closed by the generator

        def chunks() -> Iterator[bytes]:
            with handle:
                while chunk := handle.read(CHUNK):
                    yield chunk

        return chunks()

    def exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def delete(self, digest: str) -> None:
        self._path(digest).unlink(missing_ok=True)
