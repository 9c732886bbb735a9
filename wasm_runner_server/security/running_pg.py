"""The executions each workspace runs at once, counted across a cluster's nodes in their PostgreSQL
database, so that `auth.quotas.concurrent_executions` is the workspace's, not each node's.

Each running execution is a row, taken under a transaction-scoped advisory lock on its workspace (so
two nodes cannot both take the last slot) and deleted when the execution ends. Its node renews its
rows every RENEW_S while they run; a node that dies stops renewing, and its rows stop counting LAPSE_S
later. Times are the database's clock.
"""

from __future__ import annotations

import uuid

from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.postgres import Postgres

NOW = "extract(epoch from clock_timestamp())"
LAPSE_S = 30.0
"""How long a row counts without its node renewing it."""
RENEW_S = 10.0


class SharedRunning:
    def __init__(self, db: Postgres, node: str) -> None:
        self.db = db
        self.node = node
        self.renew_s = RENEW_S
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
            return token

    def release(self, token: str) -> None:
        self.db.execute("DELETE FROM running_executions WHERE token = %s", (token,))

    def renew(self) -> None:
        """This node's executions still run; the rows of nodes that stopped renewing are deleted."""
        self.db.execute(f"UPDATE running_executions SET expires_at = {NOW} + %s WHERE node = %s", (LAPSE_S, self.node))
        self.db.execute(f"DELETE FROM running_executions WHERE expires_at <= {NOW}")

    def close(self) -> None:
        try:
            self.db.execute("DELETE FROM running_executions WHERE node = %s", (self.node,))
        finally:
            postgres.release(self.db)
