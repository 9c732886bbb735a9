"""The artifacts' metadata: one row per artifact, the bytes named by its sha256; in SQLite (WAL) in the
data directory, or in the PostgreSQL database a cluster's nodes share (`metadata.sql`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wasm_runner_server.metadata.sql import Sql, open_sqlite

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
    def __init__(self, path: str | Path | None = None, *, sql: Sql | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        """The catalog in the SQLite file at `path`, or on `sql` (a shared database; `on_close` lets it go)."""
        if sql is None:
            if path is None:
                raise ValueError("an artifact catalog needs a path or a database")
            sql, on_close = open_sqlite(Path(path), _SCHEMA, "artifacts")
        self._db = sql
        self._on_close = on_close
        self._lock = threading.Lock()
        """One statement at a time (a SQLite connection is shared by the threads that publish and list)."""

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()

    def _rows(self, sql: str, args: tuple | list = ()) -> list[Artifact]:
        with self._lock:
            return [Artifact(*row) for row in self._db.rows(sql, args)]

    def add(self, artifact: Artifact) -> None:
        with self._lock:
            self._db.run(f"INSERT INTO artifacts ({_COLUMNS}) VALUES ({', '.join('?' * 12)})",
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
            return self._db.run("DELETE FROM artifacts WHERE id = ?", (artifact_id,)) > 0

    def expired(self, now: float) -> list[Artifact]:
        return self._rows(f"SELECT {_COLUMNS} FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))

    def references(self, digest: str) -> int:
        with self._lock:
            row = self._db.one("SELECT COUNT(*) FROM artifacts WHERE sha256 = ?", (digest,))
        return row[0] if row is not None else 0
