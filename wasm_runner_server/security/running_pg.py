"""The executions each workspace runs at once, counted across a cluster's nodes in their PostgreSQL
database, so that `auth.quotas.concurrent_executions` is the workspace's, not each node's.

Each running execution is a row, taken under a transaction-scoped advisory lock on its workspace (so
two nodes cannot both take the last slot) and deleted when the execution ends. Its node renews the
rows of the executions it runs every RENEW_S; a row its node stopped renewing (the node died, or the
delete failed) stops counting LAPSE_S later. Times are the database's clock.
"""

from __future__ import annotations

import logging
import threading
import uuid

from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.postgres import Postgres
from wasm_runner_server.metadata.sql import UNREACHABLE

log = logging.getLogger("wasm_runner.server")

NOW = "extract(epoch from clock_timestamp())"
LAPSE_S = 30.0
"""How long a row counts without its node renewing it."""
RENEW_S = 10.0


class SharedRunning:
    def __init__(self, db: Postgres, node: str) -> None:
        self.db = db
        self.node = node
        self.renew_s = RENEW_S
        self._lock = threading.Lock()
        self._held: set[str] = set()
        db.execute("DELETE FROM running_executions WHERE node = %s", (node,))  # an earlier life's, never ended

    def acquire(self, workspace: str, cap: int) -> str | None:
        """A slot of `workspace` (its token), or None when it runs `cap` executions already."""
        with self.db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('running:' || %s))", (workspace,))
            row = conn.execute(f"SELECT count(*) FROM running_executions WHERE workspace = %s AND expires_at > {NOW}",
                               (workspace,)).fetchone()
            if row is not None and row[0] >= cap:
                return None
            token = uuid.uuid4().hex
            conn.execute(f"INSERT INTO running_executions (token, workspace, node, expires_at) VALUES "
                         f"(%s, %s, %s, {NOW} + %s)", (token, workspace, self.node, LAPSE_S))
        with self._lock:
            self._held.add(token)
        return token

    def release(self, token: str) -> None:
        with self._lock:
            self._held.discard(token)  # not renewed from now on, even if the delete fails
        self.db.execute("DELETE FROM running_executions WHERE token = %s", (token,))

    def renew(self) -> None:
        """The executions this node runs still run; the rows no node renews any more are deleted."""
        with self._lock:
            held = list(self._held)
        if held:
            self.db.execute(f"UPDATE running_executions SET expires_at = {NOW} + %s WHERE token = ANY(%s)",
                            (LAPSE_S, held))
        self.db.execute(f"DELETE FROM running_executions WHERE expires_at <= {NOW}")

    def close(self) -> None:
        try:  # normally none is left (each execution deleted its row); the database may be down
            self.db.execute("DELETE FROM running_executions WHERE node = %s", (self.node,))
        except UNREACHABLE:
            log.warning("running executions not cleared: they lapse", extra={"event": "metadata_unavailable"})
        finally:
            postgres.release(self.db)
