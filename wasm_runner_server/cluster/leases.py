"""Sessions' leases in the shared PostgreSQL database: which node serves a session, under which epoch.

A lease row names the owner node, an epoch and an expiry (by the database's clock, so that the nodes'
clocks do not matter). The owner renews its leases; once one has expired, any node may claim it,
which raises the epoch and makes the claimer the session's node (the `sessions` row too, in the same
transaction). Every generation a node stores is committed here with the epoch it holds (`commit`):
a node whose lease was claimed by another (it was paused, or cut off) finds its epoch gone and its
write refused, so it acknowledges nothing from then on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.sessions.store import COLUMNS, SessionRow, row_of

NOW = "extract(epoch from clock_timestamp())"
RELEASED = 0
"""A lease's expiry once its node let the session go (stored and hibernated): no node restarting claims it."""
UNHELD = -1
"""The expiry of a first lease made for a session of a node from before object storage: its node may claim it."""


@dataclass(frozen=True)
class Lease:
    epoch: int
    generation: int
    """The last generation stored under any epoch (0: none)."""


@dataclass(frozen=True)
class Holder:
    node: str
    expires_in_s: float


class Leases:
    def __init__(self, settings: StoreSettings, node: str, lease_s: float) -> None:
        self.node = node
        self.lease_s = lease_s
        self._db = postgres.acquire(settings)

    def create(self, session_id: str) -> Lease:
        """The first lease of a new session: this node's, epoch 1."""
        self._db.execute(f"INSERT INTO leases (session_id, node, epoch, generation, expires_at) "
                         f"VALUES (%s, %s, 1, 0, {NOW} + %s)", (session_id, self.node, self.lease_s))
        return Lease(1, 0)

    def claim(self, session_id: str, released: bool = True) -> Lease | None:
        """Take the session: allowed once its lease expired, or when this node holds it already (a
        restarted node); the epoch is raised either way. None: another node holds a live lease (or
        the session has no lease), or, `released` False, it was let go (`release`)."""
        with self._db.transaction() as conn:
            # a session of this node made before object storage was configured has no lease yet: its
            # node (only) may make one; another node's request for it is answered 421 as before
            conn.execute("INSERT INTO leases (session_id, node, epoch, generation, expires_at) "
                         f"SELECT id, node, 0, 0, {UNHELD} FROM sessions WHERE id=%s AND node=%s "
                         "ON CONFLICT (session_id) DO NOTHING", (session_id, self.node))
            row = conn.execute(
                f"UPDATE leases SET node=%s, epoch=epoch+1, expires_at={NOW} + %s "
                f"WHERE session_id=%s AND (expires_at < {NOW} OR node=%s) AND (%s OR expires_at <> {RELEASED}) "
                "RETURNING epoch, generation",
                (self.node, self.lease_s, session_id, self.node, released)).fetchone()
            if row is None:
                return None
            conn.execute("UPDATE sessions SET node=%s WHERE id=%s", (self.node, session_id))
        return Lease(int(row[0]), int(row[1]))

    def session(self, session_id: str) -> SessionRow | None:
        """The session's row, whichever node it names (a takeover's starting point)."""
        values = self._db.fetchone(f"SELECT {COLUMNS}, node FROM sessions WHERE id=%s", (session_id,))
        if values is None:
            return None
        row = row_of(values[:-1])
        row.node = values[-1]
        return row

    def holder(self, session_id: str) -> Holder | None:
        row = self._db.fetchone(f"SELECT node, expires_at - {NOW} FROM leases WHERE session_id=%s", (session_id,))
        return None if row is None else Holder(row[0], float(row[1]))

    def renew(self, held: dict[str, int]) -> set[str]:
        """Extend the leases this node holds under these epochs; the sessions whose lease it still holds."""
        if not held:
            return set()
        rows = self._db.fetchall(
            f"UPDATE leases SET expires_at={NOW} + %s WHERE node=%s AND session_id = ANY(%s) "
            "RETURNING session_id, epoch", (self.lease_s, self.node, list(held)))
        return {session_id for session_id, epoch in rows if held.get(session_id) == epoch}

    def commit(self, session_id: str, epoch: int, generation: int, stored_bytes: int) -> bool:
        """Record `generation` (holding `stored_bytes`) as the session's last, if this node still holds it
        under `epoch` (the lease renewed too); False: the session went to another node, and the generation
        counts for nothing."""
        return self._db.execute(
            f"UPDATE leases SET generation=%s, stored_bytes=%s, expires_at={NOW} + %s "
            "WHERE session_id=%s AND node=%s AND epoch=%s AND generation < %s",
            (generation, stored_bytes, self.lease_s, session_id, self.node, epoch, generation)) == 1

    def stored_bytes(self, session_ids: list[str]) -> dict[str, int]:
        """The bytes of each of these sessions' last stored generation (those never stored: absent)."""
        if not session_ids:
            return {}
        rows = self._db.fetchall("SELECT session_id, stored_bytes FROM leases WHERE session_id = ANY(%s)",
                                 (session_ids,))
        return {session_id: size for session_id, size in rows}

    def release(self, session_id: str, epoch: int) -> bool:
        """End this node's lease on a session it let go of (stored, hibernated): any node may claim it at
        once. False: the lease was not this node's under `epoch` any more."""
        return self._db.execute(f"UPDATE leases SET expires_at = {RELEASED} WHERE session_id=%s AND node=%s AND epoch=%s",
                                (session_id, self.node, epoch)) == 1

    def expired_unheld(self, limit: int = 100) -> list[str]:
        """Sessions past their TTL whose lease no node holds (let go, or their node died): removed by the
        node that claims them."""
        rows = self._db.fetchall(
            f"SELECT s.id FROM sessions s JOIN leases l ON l.session_id = s.id "
            f"WHERE l.expires_at < {NOW} AND s.expires_at < %s ORDER BY s.expires_at LIMIT %s", (time.time(), limit))
        return [row[0] for row in rows]

    def delete(self, session_id: str) -> None:
        self._db.execute("DELETE FROM leases WHERE session_id=%s", (session_id,))

    def close(self) -> None:
        postgres.release(self._db)
