"""The object store's few operations the session storage needs, over obstore: an S3 bucket, or a
directory shared by the nodes (NFS, CephFS, EFS).

obstore (the Rust `object_store` crate) is called synchronously, from the threads the storage runs
on; its calls release the GIL. A put of a new object is conditional: S3 is asked `If-None-Match: *`
and refuses to replace an object that exists (412); in a shared directory the object is written to
a staging file and hard-linked into place, which fails if the name exists. Either way, two writers of
one manifest generation cannot both win.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
from obstore.store import LocalStore, S3Store

from wasm_runner_server.storage.errors import AlreadyExists, ObjectMissing, StorageError
from wasm_runner_server.storage.settings import StorageSettings

if TYPE_CHECKING:
    from obstore.store import ClientConfig  # a typing-only name

__all__ = ["Objects", "open_objects"]


def open_objects(settings: StorageSettings) -> Objects:
    """The store `[storage]` names ("s3" or "posix")."""
    if settings.kind == "posix":
        if not settings.path:
            raise ValueError('storage.path is required with storage.kind = "posix"')
        return Objects(LocalStore(settings.path, mkdir=True), settings.prefix)
    if not settings.bucket:
        raise ValueError('storage.bucket is required with storage.kind = "s3"')
    options: dict[str, Any] = {"region": settings.region}
    if settings.endpoint is not None:
        options["endpoint"] = settings.endpoint
        options["virtual_hosted_style_request"] = False  # path-style: what self-hosted stores serve
    if settings.access_key_id is not None:
        options["access_key_id"] = settings.access_key_id
    if settings.secret_access_key is not None:
        options["secret_access_key"] = settings.secret_access_key.get_secret_value()
    client: ClientConfig = {"allow_http": bool(settings.endpoint and settings.endpoint.startswith("http://")),
                            "timeout": "60s", "connect_timeout": "5s"}
    return Objects(S3Store(settings.bucket, client_options=client, **options), settings.prefix)


class Objects:
    """One store (and a prefix in it)."""

    def __init__(self, store: S3Store | LocalStore, prefix: str) -> None:
        self.prefix = prefix
        self._store = store

    def put_new(self, key: str, data: bytes | memoryview) -> None:
        """Write `key` unless it exists (AlreadyExists then)."""
        try:
            obstore.put(self._store, self.prefix + key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            raise AlreadyExists(key) from None
        except Exception as exc:
            raise StorageError(f"storing {key!r} failed: {type(exc).__name__}") from exc

    def put_file(self, key: str, path: Path) -> None:
        """Write `key` from the file at `path`, replacing what is there (in parts if it is large)."""
        try:
            obstore.put(self._store, self.prefix + key, path)
        except Exception as exc:
            raise StorageError(f"storing {key!r} failed: {type(exc).__name__}") from exc

    def stream(self, key: str, chunk_bytes: int) -> Iterator[bytes]:
        """The object's bytes in chunks of about `chunk_bytes` (ObjectMissing if there is none)."""
        try:
            chunks = obstore.get(self._store, self.prefix + key).stream(min_chunk_size=chunk_bytes)
        except (NotFoundError, FileNotFoundError):
            raise ObjectMissing(key) from None
        except Exception as exc:
            raise StorageError(f"reading {key!r} failed: {type(exc).__name__}") from exc
        return (bytes(chunk) for chunk in chunks)

    def exists(self, key: str) -> bool:
        try:
            obstore.head(self._store, self.prefix + key)
        except (NotFoundError, FileNotFoundError):
            return False
        except Exception as exc:
            raise StorageError(f"reading {key!r} failed: {type(exc).__name__}") from exc
        return True

    def get(self, key: str) -> bytes:
        try:
            return bytes(obstore.get(self._store, self.prefix + key).bytes())
        except (NotFoundError, FileNotFoundError):  # (a shared directory's missing file is the latter)
            raise ObjectMissing(key) from None
        except Exception as exc:
            raise StorageError(f"reading {key!r} failed: {type(exc).__name__}") from exc

    def keys(self, prefix: str) -> Iterator[str]:
        """The keys under `prefix` (without this store's own prefix)."""
        return (key for key, _ in self.listing(prefix))

    def listing(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, when it was written, Unix time) of every object under `prefix`."""
        try:
            for batch in obstore.list(self._store, self.prefix + prefix, chunk_size=1000):
                for meta in batch:
                    yield meta["path"][len(self.prefix):], meta["last_modified"].timestamp()
        except Exception as exc:
            raise StorageError(f"listing {prefix!r} failed: {type(exc).__name__}") from exc

    def delete(self, keys: list[str]) -> None:
        if not keys:
            return
        try:
            obstore.delete(self._store, [self.prefix + key for key in keys])
        except Exception as exc:
            raise StorageError(f"deleting {len(keys)} objects failed: {type(exc).__name__}") from exc
