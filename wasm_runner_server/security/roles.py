"""Members' roles and the custom roles of each workspace, in the tenant store's database (SQLite or the
cluster's PostgreSQL, the same statements). A member without a row holds the default role."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from wasm_runner_server.metadata.sql import Sql

SCHEMA = """
CREATE TABLE IF NOT EXISTS members (
    workspace TEXT NOT NULL REFERENCES workspaces(name),
    member TEXT NOT NULL,
    role TEXT NOT NULL,               -- owner | admin | member | a custom role of the workspace
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (workspace, member)
);
CREATE TABLE IF NOT EXISTS roles (
    workspace TEXT NOT NULL REFERENCES workspaces(name),
    name TEXT NOT NULL,
    permissions TEXT NOT NULL,        -- JSON list of permission names
    description TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (workspace, name)
);
"""
"""The SQLite tables (PostgreSQL's are migration step 4 of metadata.migrations)."""


@dataclass(frozen=True)
class MemberRole:
    workspace: str
    member: str
    role: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class CustomRole:
    workspace: str
    name: str
    permissions: tuple[str, ...]
    description: str
    created_at: float
    updated_at: float


def _role(row: tuple) -> CustomRole:
    return CustomRole(row[0], row[1], tuple(json.loads(row[2])), row[3], row[4], row[5])


class RoleStore:
    """Plain reads and writes; who may change what is decided by `security.team`."""

    def __init__(self, sql: Sql) -> None:
        self._db = sql

    # -- members -------------------------------------------------------------------------------

    def member(self, workspace: str, member: str) -> MemberRole | None:
        row = self._db.one("SELECT workspace, member, role, created_at, updated_at FROM members "
                           "WHERE workspace = ? AND member = ?", (workspace, member))
        return MemberRole(*row) if row is not None else None

    def members(self, workspace: str) -> list[MemberRole]:
        return [MemberRole(*row) for row in self._db.rows(
            "SELECT workspace, member, role, created_at, updated_at FROM members WHERE workspace = ? ORDER BY member",
            (workspace,))]

    def holders(self, workspace: str, role: str) -> list[str]:
        return [r[0] for r in self._db.rows("SELECT member FROM members WHERE workspace = ? AND role = ? "
                                            "ORDER BY member", (workspace, role))]

    def set_member(self, workspace: str, member: str, role: str) -> None:
        now = time.time()
        if self._db.run("UPDATE members SET role = ?, updated_at = ? WHERE workspace = ? AND member = ?",
                        (role, now, workspace, member)) == 0:
            self._db.insert_many("members", ("workspace", "member", "role", "created_at", "updated_at"),
                                 [(workspace, member, role, now, now)], ignore_existing=True)
            self._db.run("UPDATE members SET role = ?, updated_at = ? WHERE workspace = ? AND member = ?",
                         (role, now, workspace, member))  # a row another writer inserted meanwhile

    def remove_member(self, workspace: str, member: str) -> bool:
        return self._db.run("DELETE FROM members WHERE workspace = ? AND member = ?", (workspace, member)) > 0

    # -- custom roles --------------------------------------------------------------------------

    def role(self, workspace: str, name: str) -> CustomRole | None:
        row = self._db.one("SELECT workspace, name, permissions, description, created_at, updated_at FROM roles "
                           "WHERE workspace = ? AND name = ?", (workspace, name))
        return _role(row) if row is not None else None

    def roles(self, workspace: str) -> list[CustomRole]:
        return [_role(row) for row in self._db.rows(
            "SELECT workspace, name, permissions, description, created_at, updated_at FROM roles "
            "WHERE workspace = ? ORDER BY name", (workspace,))]

    def create_role(self, workspace: str, name: str, permissions: tuple[str, ...], description: str) -> bool:
        """False when the workspace has a role of that name already."""
        now = time.time()
        return self._db.insert_many("roles", ("workspace", "name", "permissions", "description", "created_at",
                                              "updated_at"),
                                    [(workspace, name, json.dumps(sorted(set(permissions))), description, now, now)],
                                    ignore_existing=True) > 0

    def update_role(self, workspace: str, name: str, permissions: tuple[str, ...], description: str) -> bool:
        return self._db.run("UPDATE roles SET permissions = ?, description = ?, updated_at = ? "
                            "WHERE workspace = ? AND name = ?",
                            (json.dumps(sorted(set(permissions))), description, time.time(), workspace, name)) > 0

    def delete_role(self, workspace: str, name: str) -> bool:
        return self._db.run("DELETE FROM roles WHERE workspace = ? AND name = ?", (workspace, name)) > 0
