"""The artifact store: publish bytes as an immutable artifact, find, delete, and let retention prune.

Bytes go to a `BlobStorage` (content-addressed: publishing the same bytes twice stores them
once), metadata to the `ArtifactCatalog`; a blob is deleted once no artifact names it. The
store lives in `<data_dir>/artifacts/`, apart from the sessions, so an artifact outlives the
session it came from and the service's restarts.
"""

from __future__ import annotations

import mimetypes
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from wasm_runner_server.artifacts.catalog import DB_NAME, Artifact, ArtifactCatalog
from wasm_runner_server.artifacts.settings import ArtifactSettings
from wasm_runner_server.artifacts.storage import BlobStorage, LocalBlobStorage


def media_type_of(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


class ArtifactStore:
    def __init__(self, catalog: ArtifactCatalog, blobs: BlobStorage, settings: ArtifactSettings) -> None:
        self.catalog = catalog
        self.blobs = blobs
        self.settings = settings

    @classmethod
    def in_data_dir(cls, data_dir: Path, settings: ArtifactSettings) -> ArtifactStore:
        root = Path(data_dir) / "artifacts"
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return cls(ArtifactCatalog(root / DB_NAME), LocalBlobStorage(root / "blobs"), settings)

    def close(self) -> None:
        self.catalog.close()

    def publish(self, chunks: Iterable[bytes], *, workspace: str, key_id: str, session: str | None,
                source_path: str | None, name: str, media_type: str | None, note: str) -> Artifact:
        """Store the bytes and their row (BlobTooLargeError past `settings.max_bytes`)."""
        digest, size = self.blobs.put(chunks, max_bytes=self.settings.max_bytes)
        now = time.time()
        retention = self.settings.retention_s(workspace)
        artifact = Artifact(id="art_" + secrets.token_hex(12), workspace=workspace, session=session,
                            source_path=source_path, key_id=key_id, name=name,
                            media_type=media_type or media_type_of(name), size=size, sha256=digest, note=note,
                            created_at=now, expires_at=now + retention if retention is not None else None)
        self.catalog.add(artifact)
        return artifact

    def get(self, artifact_id: str, workspace: str) -> Artifact | None:
        """The artifact if it exists, belongs to `workspace` and has not expired."""
        artifact = self.catalog.get(artifact_id)
        if artifact is None or artifact.workspace != workspace:
            return None
        if artifact.expires_at is not None and artifact.expires_at <= time.time():
            return None
        return artifact

    def content(self, artifact: Artifact) -> Iterator[bytes]:
        return self.blobs.open(artifact.sha256)

    def delete(self, artifact: Artifact) -> None:
        if (self.catalog.delete(artifact.id) and not self.blobs.deferred_delete
                and self.catalog.references(artifact.sha256) == 0):
            self.blobs.delete(artifact.sha256)

    def prune(self, now: float | None = None) -> list[Artifact]:
        """Remove the artifacts past their retention, and the shared blobs no artifact names; the artifacts
        removed."""
        expired = self.catalog.expired(now if now is not None else time.time())
        for artifact in expired:
            self.delete(artifact)
        for digest in self.blobs.orphans(now):
            if self.catalog.references(digest) == 0:
                self.blobs.delete(digest)
        return expired
