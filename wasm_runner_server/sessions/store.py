"""Session metadata in SQLite (WAL): what must survive a restart besides the files.

Creation and deletion are committed at once, from the event loop, before the response
that reports them: a WAL commit without checkpoint is a sub-millisecond local write, and
the checkpoints run on their own thread (`wal.Checkpointer`). A committed session
survives a kill of the process; with `synchronous="NORMAL"` (the default) it may not
survive a power loss, with `"FULL"` it does (see `wal`). A change of a session's network policy
is committed at once too: a narrowed policy must not come back wider after a restart. The frequently changing fields
(last use, kernels, execution count) are written in batches by the sweep, on a thread
(5,000 changed sessions take about 50 ms), and on shutdown (`save_many`): after a kill
they can be a sweep behind. A lock serialises the connection's use.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_server.wal import Checkpointer, Synchronous, connect_wal

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_used_at REAL NOT NULL,
    idle_timeout_s REAL NOT NULL,
    ttl_s REAL NOT NULL,
    expires_at REAL NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    kernels TEXT NOT NULL DEFAULT '[]',
    executions INTEGER NOT NULL DEFAULT 0,
    egress TEXT,                      -- the session's network policy (JSON), NULL: its profile's
    tools TEXT                        -- the tool names its runs may use (JSON list), NULL: its profile's
);
CREATE INDEX IF NOT EXISTS sessions_by_creation ON sessions (created_at, id);
CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions (expires_at);
"""
ADDED_COLUMNS = {"egress": "TEXT", "tools": "TEXT"}
"""Columns a store made by an earlier version lacks: added when it is opened."""


@dataclass
class SessionRow:
    id: str
    profile: str
    created_at: float
    last_used_at: float
    idle_timeout_s: float
    ttl_s: float
    metadata: dict[str, str] = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)
    """Languages whose kernel held state (live, or lost and not yet rebuilt)."""
    executions: int = 0
    egress: EgressPolicy | None = None
    """The session's own network policy (None: its profile's)."""
    tools: list[str] | None = None
    """The only tool names its runs may use, chosen at creation (None: its profile's allowlist)."""
    node: str = ""
    """The node holding its files and kernels ("" in a store that one node alone uses)."""

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_s


COLUMNS = ("id, profile, created_at, last_used_at, idle_timeout_s, ttl_s, metadata, kernels, executions, egress, "
            "tools")


class SessionMetadata(Protocol):
    """What the session manager asks of its store, whatever the database (SQLite here, PostgreSQL in
    `store_pg`)."""

    node: str
    """This node's name ("" when the store is this node's alone)."""

    def insert(self, row: SessionRow) -> bool: ...
    def save_many(self, rows: list[SessionRow]) -> None: ...
    def set_egress(self, session_id: str, policy: EgressPolicy | None) -> None: ...
    def set_ttl(self, session_id: str, ttl_s: float) -> None: ...
    def delete(self, session_id: str) -> None: ...
    def all(self) -> list[SessionRow]:
        """This node's sessions (a node restores only its own)."""
        ...
    def page(self, after: tuple[float, str] | None, limit: int) -> list[str]:
        """Every node's session ids in creation order, after the (created_at, id) cursor."""
        ...
    def elsewhere(self, session_ids: list[str]) -> list[SessionRow]:
        """The rows of those of these sessions that live on another node."""
        ...
    def close(self) -> None: ...


def row_of(values: tuple) -> SessionRow:
    (id_, profile, created, used, idle, ttl, metadata, kernels, executions, egress, tools) = values
    return SessionRow(id_, profile, created, used, idle, ttl, json.loads(metadata), json.loads(kernels), executions,
                      _policy(egress), None if tools is None else list(json.loads(tools)))


def values_of(row: SessionRow) -> tuple:
    """The row's values in `COLUMNS` order, as stored."""
    return (row.id, row.profile, row.created_at, row.last_used_at, row.idle_timeout_s, row.ttl_s,
            json.dumps(row.metadata), json.dumps(row.kernels), row.executions, policy_text(row.egress),
            None if row.tools is None else json.dumps(row.tools))


def _policy(text: str | None) -> EgressPolicy | None:
    return None if text is None else msgspec.json.decode(text, type=EgressPolicy)


def policy_text(policy: EgressPolicy | None) -> str | None:
    return None if policy is None else msgspec.json.encode(policy).decode()


class SessionStore:
    """The sessions of one node, in SQLite."""

    node = ""

    def __init__(self, path: str | Path, synchronous: Synchronous = "NORMAL") -> None:
        self.path = Path(path)
        self._db = connect_wal(self.path, synchronous)
        self._lock = threading.Lock()
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} was written by a newer version (schema {version})")
        self._db.executescript(_SCHEMA)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
        for name, kind in ADDED_COLUMNS.items():
            if name not in present:
                self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._checkpointer = Checkpointer(self.path, "wasm-runner-sessions-checkpoint")

    def insert(self, row: SessionRow) -> bool:
        """Add a session; False if the id is taken."""
        try:
            with self._lock:
                self._db.execute(
                    f"INSERT INTO sessions ({COLUMNS}, expires_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (*values_of(row), row.expires_at),
                )
        except sqlite3.IntegrityError:
            return False
        return True

    def save_many(self, rows: list[SessionRow]) -> None:
        """Write the changing fields of these sessions (from any thread)."""
        if not rows:
            return
        with self._lock, self._transaction():
            self._db.executemany(
                "UPDATE sessions SET last_used_at=?, kernels=?, executions=? WHERE id=?",
                [(r.last_used_at, json.dumps(r.kernels), r.executions, r.id) for r in rows],
            )

    def set_egress(self, session_id: str, policy: EgressPolicy | None) -> None:
        """Write the session's network policy now (None: back to its profile's)."""
        with self._lock:
            self._db.execute("UPDATE sessions SET egress=? WHERE id=?", (policy_text(policy), session_id))

    def set_ttl(self, session_id: str, ttl_s: float) -> None:
        """Write the session's TTL (and so its end) now."""
        with self._lock:
            self._db.execute("UPDATE sessions SET ttl_s=?, expires_at=created_at+? WHERE id=?",
                             (ttl_s, ttl_s, session_id))

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM sessions WHERE id=?", (session_id,))

    def all(self) -> list[SessionRow]:
        with self._lock:
            values = self._db.execute(f"SELECT {COLUMNS} FROM sessions ORDER BY created_at, id").fetchall()
        return [row_of(v) for v in values]

    def page(self, after: tuple[float, str] | None, limit: int) -> list[str]:
        """Session ids in creation order, after the (created_at, id) cursor."""
        with self._lock:
            if after is None:
                cur = self._db.execute("SELECT id FROM sessions ORDER BY created_at, id LIMIT ?", (limit,))
            else:
                cur = self._db.execute(
                    "SELECT id FROM sessions WHERE created_at > ? OR (created_at = ? AND id > ?) "
                    "ORDER BY created_at, id LIMIT ?", (after[0], after[0], after[1], limit))
            return [r[0] for r in cur]

    def elsewhere(self, session_ids: list[str]) -> list[SessionRow]:
        return []  # every session here is this node's

    def close(self) -> None:
        self._checkpointer.close()
        with self._lock:
            self._db.close()

    def _transaction(self):
        db = self._db

        class _Tx:
            def __enter__(self):
                db.execute("BEGIN")

            def __exit__(self, exc_type, *rest):
                db.execute("ROLLBACK" if exc_type else "COMMIT")

        return _Tx()
