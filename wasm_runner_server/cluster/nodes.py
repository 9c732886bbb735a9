"""The cluster's nodes in the shared PostgreSQL database: where each is reached, and where a session is.

A node records the URL the others reach it at when it starts (`advertise`). `locate` answers, for a
session, the node that holds it, that node's URL and how long its lease (with object storage) still
runs: what a node needs to forward a request to the session's node (http/forwarding.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.settings import StoreSettings

NOW = "extract(epoch from clock_timestamp())"


@dataclass(frozen=True)
class Location:
    node: str
    url: str | None
    """None: that node never said where it is reached (it listens on every address, unnamed)."""
    lease_left_s: float | None
    """Seconds its lease still runs, negative once it expired (None: the session has no lease: it
    never moves, as without object storage)."""


class NodeDirectory:
    def __init__(self, settings: StoreSettings, node: str) -> None:
        self.node = node
        self._db = postgres.acquire(settings)

    def advertise(self, url: str) -> None:
        self._db.execute(f"INSERT INTO nodes (node, url, seen_at) VALUES (%s, %s, {NOW}) "
                         f"ON CONFLICT (node) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at",
                         (self.node, url))

    def locate(self, session_id: str) -> Location | None:
        """Where `session_id` is served (None: no such session in the shared database)."""
        row = self._db.fetchone(
            f"SELECT s.node, n.url, l.expires_at - {NOW} FROM sessions s LEFT JOIN nodes n ON n.node = s.node "
            "LEFT JOIN leases l ON l.session_id = s.id WHERE s.id = %s", (session_id,))
        if row is None:
            return None
        return Location(row[0], row[1], None if row[2] is None else float(row[2]))

    def close(self) -> None:
        postgres.release(self._db)
