"""Session metadata in PostgreSQL, shared by the nodes of a cluster.

Each row names the node holding the session's files and kernels: a node restores only its own sessions
at start (`all`), lists every node's (`page`), and learns from `elsewhere` that a session it does not
hold lives on another node. What is committed when is as in the SQLite store (`store`): creation,
deletion and policy changes at once, the frequently changing fields in the sweep's batches.
"""

from __future__ import annotations

import json

from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.sessions.store import COLUMNS, SessionRow, policy_text, row_of, values_of

_SELECT = f"SELECT {COLUMNS}, node FROM sessions"


def _with_node(values: tuple) -> SessionRow:
    row = row_of(values[:-1])
    row.node = values[-1]
    return row


class PostgresSessionStore:
    def __init__(self, settings: StoreSettings, node: str) -> None:
        self.node = node
        self._db = postgres.acquire(settings)

    def insert(self, row: SessionRow) -> bool:
        row.node = self.node
        placeholders = ", ".join(["%s"] * 13)
        changed = self._db.execute(
            f"INSERT INTO sessions ({COLUMNS}, expires_at, node) VALUES ({placeholders}) ON CONFLICT (id) DO NOTHING",
            (*values_of(row), row.expires_at, self.node))
        return changed == 1

    def save_many(self, rows: list[SessionRow]) -> None:
        if not rows:
            return
        self._db.executemany("UPDATE sessions SET last_used_at=%s, kernels=%s, executions=%s WHERE id=%s AND node=%s",
                             [(r.last_used_at, json.dumps(r.kernels), r.executions, r.id, self.node) for r in rows])

    def set_egress(self, session_id: str, policy: EgressPolicy | None) -> None:
        self._db.execute("UPDATE sessions SET egress=%s WHERE id=%s", (policy_text(policy), session_id))

    def set_ttl(self, session_id: str, ttl_s: float) -> None:
        self._db.execute("UPDATE sessions SET ttl_s=%s, expires_at=created_at+%s WHERE id=%s",
                         (ttl_s, ttl_s, session_id))

    def delete(self, session_id: str) -> None:
        self._db.execute("DELETE FROM sessions WHERE id=%s AND node=%s", (session_id, self.node))

    def all(self) -> list[SessionRow]:
        return [_with_node(v) for v in self._db.fetchall(f"{_SELECT} WHERE node=%s ORDER BY created_at, id",
                                                          (self.node,))]

    def page(self, after: tuple[float, str] | None, limit: int) -> list[str]:
        if after is None:
            rows = self._db.fetchall("SELECT id FROM sessions ORDER BY created_at, id LIMIT %s", (limit,))
        else:
            rows = self._db.fetchall("SELECT id FROM sessions WHERE (created_at, id) > (%s, %s) "
                                     "ORDER BY created_at, id LIMIT %s", (after[0], after[1], limit))
        return [r[0] for r in rows]

    def elsewhere(self, session_ids: list[str]) -> list[SessionRow]:
        if not session_ids:
            return []
        return [_with_node(v) for v in self._db.fetchall(
            f"{_SELECT} WHERE id = ANY(%s) AND node <> %s ORDER BY created_at, id", (list(session_ids), self.node))]

    def close(self) -> None:
        postgres.release(self._db)
