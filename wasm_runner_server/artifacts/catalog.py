"""The artifacts' metadata in SQLite (WAL): one row per artifact, the bytes named by its sha256."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from wasm_runner_server.wal import Checkpointer, connect_wal

DB_NAME = "artifacts.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS artifacts (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    session TEXT,
    source_path TEXT,
    key_id TEXT NOT NULL,
    name TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL
);
CREATE INDEX IF NOT EXISTS artifacts_by_workspace ON artifacts (workspace, created_at, id);
CREATE INDEX IF NOT EXISTS artifacts_by_expiry ON artifacts (expires_at);
CREATE INDEX IF NOT EXISTS artifacts_by_sha ON artifacts (sha256);
"""


@dataclass(frozen=True, slots=True)
class Artifact:
    id: str
    workspace: str
    session: str | None
    source_path: str | None
    key_id: str
    name: str
    media_type: str
    size: int
    sha256: str
    note: str
    created_at: float
    expires_at: float | None


_COLUMNS = ", ".join(Artifact.__slots__)


class ArtifactCatalog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = connect_wal(self.path)
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._checkpointer = Checkpointer(self.path, "wasm-runner-artifacts-checkpoint")

    def close(self) -> None:
        self._checkpointer.close()
        with self._lock:
            self._db.close()

    def _rows(self, sql: str, args: tuple | list = ()) -> list[Artifact]:
        with self._lock:
            return [Artifact(*row) for row in self._db.execute(sql, args)]

    def add(self, artifact: Artifact) -> None:
        with self._lock:
            self._db.execute(f"INSERT INTO artifacts ({_COLUMNS}) VALUES ({', '.join('?' * 12)})",
                             tuple(getattr(artifact, n) for n in Artifact.__slots__))

    def get(self, artifact_id: str) -> Artifact | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM artifacts WHERE id = ?", (artifact_id,))
        return rows[0] if rows else None

    def page(self, workspace: str, *, session: str | None, after: tuple[float, str] | None,
             limit: int) -> list[Artifact]:
        """The workspace's artifacts, oldest first, after the (created_at, id) of a cursor."""
        sql = f"SELECT {_COLUMNS} FROM artifacts WHERE workspace = ?"
        args: list = [workspace]
        if session is not None:
            sql += " AND session = ?"
            args.append(session)
        if after is not None:
            sql += " AND (created_at, id) > (?, ?)"
            args += [after[0], after[1]]
        return self._rows(sql + " ORDER BY created_at, id LIMIT ?", [*args, limit])

    def delete(self, artifact_id: str) -> bool:
        with self._lock:
            return self._db.execute("DELETE FROM artifacts WHERE id = ?", (artifact_id,)).rowcount > 0

    def expired(self, now: float) -> list[Artifact]:
        return self._rows(f"SELECT {_COLUMNS} FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))

    def references(self, digest: str) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM artifacts WHERE sha256 = ?", (digest,)).fetchone()[0]



