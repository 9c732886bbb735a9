"""Workspaces (tenants), their API keys and which workspace owns each session, in SQLite (WAL) or in
the PostgreSQL database a cluster's nodes share (`in_postgres`; the same statements, `metadata.sql`).

A key is `wr_<key id>_<secret>`; only the SHA-256 of the whole key is stored, and a
presented key is compared with `hmac.compare_digest`. The key id (the part before the
secret) is the key's public, listable prefix. The admin CLI writes the same database
file the server reads on every request, so a revocation takes effect at once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wasm_runner_server.metadata.sql import Sql, open_sqlite
from wasm_runner_server.security import roles
from wasm_runner_server.security.key_kinds import KINDS

KEY_PREFIX = "wr_"
DB_NAME = "tenants.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS workspaces (
    name TEXT PRIMARY KEY,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL REFERENCES workspaces(name),
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    hash TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_used_at REAL,
    revoked_at REAL,
    member TEXT
);
CREATE TABLE IF NOT EXISTS session_owners (
    session_id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    key_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    ephemeral INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    disk TEXT,
    workdir TEXT
);
CREATE INDEX IF NOT EXISTS owners_by_workspace ON session_owners (workspace);
"""

WORKSPACE_PATTERN = r"^[A-Za-z0-9_-]{1,64}\Z"
"""\\Z, not $ (which also matches before a final newline)."""
MEMBER_PATTERN = WORKSPACE_PATTERN
"""A member id names a directory of the workspace's (a member's disk), so it is as narrow as a workspace's."""
_KEY_COLUMNS = "id, workspace, name, kind, created_at, last_used_at, revoked_at, member"


@dataclass(frozen=True)
class KeyRecord:
    id: str
    workspace: str
    name: str
    kind: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None
    member: str | None = None
    """The person a member or admin key acts for (None: an app key, or a key made before members had ids)."""

    @property
    def prefix(self) -> str:
        return KEY_PREFIX + self.id


@dataclass(frozen=True)
class Owner:
    session_id: str
    workspace: str
    key_id: str
    kind: str
    ephemeral: bool
    disk: str = ""
    """Its /workspace, relative to its workspace's directory (e.g. `members/alice`); "" for a
    directory of the session's own."""
    workdir: str = ""
    """The guest's working directory under /workspace ("" for /workspace itself)."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def split_key(key: str) -> str | None:
    """The key id of a well-formed key, else None."""
    if not key.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = key[len(KEY_PREFIX):].partition("_")
    if not sep or len(key_id) != 12 or not key_id.isalnum() or len(secret) < 20:
        return None
    return key_id


def _upgrade(db: sqlite3.Connection) -> None:
    """The columns a database made by an older release lacks."""
    if "member" not in {row[1] for row in db.execute("PRAGMA table_info(keys)")}:
        db.execute("ALTER TABLE keys ADD COLUMN member TEXT")  # made before members
    if "disk" not in {row[1] for row in db.execute("PRAGMA table_info(session_owners)")}:
        db.execute("ALTER TABLE session_owners ADD COLUMN disk TEXT")  # made before disk layouts
        db.execute("ALTER TABLE session_owners ADD COLUMN workdir TEXT")


class TenantStore:
    def __init__(self, path: str | Path | None = None, *, sql: Sql | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        """The store in the SQLite file at `path`, or on `sql` (a shared database; `on_close` lets it go)."""
        self._on_close = on_close
        if sql is None:
            if path is None:
                raise ValueError("a tenant store needs a path or a database")
            self.path: Path | None = Path(path)
            sql, self._on_close = open_sqlite(self.path, _SCHEMA + roles.SCHEMA, "tenants", _upgrade)
        else:
            self.path = None
        self._db = sql
        self.roles = roles.RoleStore(sql)
        """The members' roles and the custom roles, in the same database."""
        self._touched: dict[str, float] = {}
        self._owners: dict[str, Owner] = {}
        self._temporary: dict[str, Owner] = {}
        """The owners of temporary sessions: in memory only, so no database holds their ids."""
        self._cache_owners = self.path is not None
        """Only where this process alone gives sessions owners: in a shared database another node may
        release a session and give its id to another workspace."""

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> TenantStore:
        return cls(Path(data_dir) / DB_NAME)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()

    # -- workspaces and keys -------------------------------------------------------------

    def ensure_workspace(self, name: str) -> None:
        if not re.match(WORKSPACE_PATTERN, name):
            raise ValueError("a workspace name is 1-64 letters, digits, '-' or '_'")
        self._db.insert_many("workspaces", ("name", "created_at"), [(name, time.time())], ignore_existing=True)

    def workspaces(self) -> list[tuple[str, float, int]]:
        """(name, created_at, active keys) for every workspace."""
        return list(self._db.rows(
            "SELECT w.name, w.created_at, (SELECT COUNT(*) FROM keys k WHERE k.workspace = w.name "
            "AND k.revoked_at IS NULL) FROM workspaces w ORDER BY w.name"))

    def create_key(self, workspace: str, name: str, kind: str = "member",
                   member: str | None = None) -> tuple[str, KeyRecord]:
        """A new key: (the key itself, shown once and never again; its record).

        `member` names the person a member or admin key acts for (several keys may act for one); an app
        key acts for its developer's application, never for a member.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        if not name or len(name) > 128:
            raise ValueError("a key name is 1-128 characters")
        if member is not None and not re.match(MEMBER_PATTERN, member):
            raise ValueError("a member id is 1-64 letters, digits, '-' or '_'")
        if member is not None and kind == "app":
            raise ValueError("an app key acts for an application, not a member: leave the member out")
        self.ensure_workspace(workspace)
        key_id = secrets.token_hex(6)
        key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        now = time.time()
        self._db.run("INSERT INTO keys (id, workspace, name, kind, hash, created_at, member) VALUES (?,?,?,?,?,?,?)",
                     (key_id, workspace, name, kind, hash_key(key), now, member))
        return key, KeyRecord(key_id, workspace, name, kind, now, None, None, member)

    def keys(self, workspace: str | None = None, *, include_revoked: bool = True) -> list[KeyRecord]:
        sql = f"SELECT {_KEY_COLUMNS} FROM keys"
        where, args = [], []
        if workspace is not None:
            where.append("workspace = ?")
            args.append(workspace)
        if not include_revoked:
            where.append("revoked_at IS NULL")
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [KeyRecord(*row) for row in self._db.rows(sql + " ORDER BY created_at, id", args)]

    def revoke(self, key_ref: str, workspace: str | None = None) -> KeyRecord | None:
        """Revoke by key id or prefix (`wr_<id>`); None when no such (unrevoked) key."""
        key_id = key_ref[len(KEY_PREFIX):] if key_ref.startswith(KEY_PREFIX) else key_ref
        key_id = key_id.split("_", 1)[0]
        sql = "UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
        args: list = [time.time(), key_id]
        if workspace is not None:
            sql += " AND workspace = ?"
            args.append(workspace)
        if self._db.run(sql, args) == 0:
            return None
        return next((k for k in self.keys() if k.id == key_id), None)

    def active_key(self, key_id: str) -> KeyRecord | None:
        """The record of an unrevoked key by its id (read each time: a revocation counts at once)."""
        row = self._db.one(f"SELECT {_KEY_COLUMNS} FROM keys WHERE id = ? AND revoked_at IS NULL", (key_id,))
        return KeyRecord(*row) if row is not None else None

    def verify(self, key: str) -> KeyRecord | None:
        """The record of a valid, unrevoked key; None otherwise. Constant-time hash comparison."""
        key_id = split_key(key)
        if key_id is None:
            hmac.compare_digest(hash_key(key), "0" * 64)  # same work for malformed keys
            return None
        row = self._db.one(f"SELECT {_KEY_COLUMNS}, hash FROM keys WHERE id = ?", (key_id,))
        stored = row[8] if row is not None else "0" * 64
        matches = hmac.compare_digest(hash_key(key), stored)
        if row is None or not matches or row[6] is not None:
            return None
        now = time.time()
        if now - self._touched.get(key_id, 0.0) >= 1.0:  # last_used_at to the second, not a write per request
            self._touched[key_id] = now
            self._db.run("UPDATE keys SET last_used_at = ? WHERE id = ?", (now, key_id))
        return KeyRecord(*row[:8])

    # -- session ownership ------------------------------------------------------------------

    def claim(self, session_id: str, workspace: str, key_id: str, kind: str, ephemeral: bool,
              disk: str = "", workdir: str = "") -> None:
        """`session_id` belongs to `workspace`; `disk` and `workdir` place its /workspace (see Owner).
        `ephemeral`: a temporary session, whose owner is kept in this process's memory only (in a directory
        of its own: a temporary session starts from nothing)."""
        self._owners.pop(session_id, None)
        if ephemeral:
            self._temporary[session_id] = Owner(session_id, workspace, key_id, kind, True)
            return
        self._db.upsert("session_owners", "session_id",
                        ("session_id", "workspace", "key_id", "kind", "ephemeral", "created_at", "disk", "workdir"),
                        (session_id, workspace, key_id, kind, int(ephemeral), time.time(), disk or None,
                         workdir or None))

    def owner(self, session_id: str) -> Owner | None:
        cached = self._temporary.get(session_id) or self._owners.get(session_id)  # asked on every call
        if cached is not None:
            return cached
        row = self._db.one("SELECT session_id, workspace, key_id, kind, ephemeral, disk, workdir FROM session_owners "
                           "WHERE session_id = ?", (session_id,))
        if row is None:
            return None
        owner = Owner(row[0], row[1], row[2], row[3], bool(row[4]), row[5] or "", row[6] or "")
        if self._cache_owners:
            self._owners[session_id] = owner
        return owner

    def sessions_of(self, workspace: str) -> list[str]:
        stored = [r[0] for r in self._db.rows("SELECT session_id FROM session_owners WHERE workspace = ?",
                                              (workspace,))]
        return stored + [s for s, owner in list(self._temporary.items()) if owner.workspace == workspace]

    def ephemeral_sessions(self) -> list[str]:
        """The temporary sessions: this process's, and any an earlier version recorded in the database."""
        stored = [r[0] for r in self._db.rows("SELECT session_id FROM session_owners WHERE ephemeral = 1")]
        return stored + list(self._temporary)

    def release(self, session_id: str) -> None:
        self._owners.pop(session_id, None)
        if self._temporary.pop(session_id, None) is not None:
            return
        self._db.run("DELETE FROM session_owners WHERE session_id = ?", (session_id,))
