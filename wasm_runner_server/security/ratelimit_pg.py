"""The API keys' request rate as one token bucket per key in the cluster's PostgreSQL database, so a
key gets its rate across all nodes, not on each. A take is one atomic statement (an upsert that
refills by the time since the last take, then takes a token if there is one), a database round trip
per authenticated request. Time is the nodes' wall clock: a node whose clock is behind refills
nothing until its clock passes the bucket's last take (never a negative refill)."""

from __future__ import annotations

import time
from collections.abc import Callable

from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.postgres import Postgres

_TAKE = """
INSERT INTO rate_buckets AS b (key, tokens, at, granted) VALUES (%(key)s, %(burst)s - 1, %(now)s, true)
ON CONFLICT (key) DO UPDATE SET
    tokens = CASE WHEN LEAST(%(burst)s, b.tokens + GREATEST(0, %(now)s - b.at) * %(rate)s) >= 1
                  THEN LEAST(%(burst)s, b.tokens + GREATEST(0, %(now)s - b.at) * %(rate)s) - 1
                  ELSE LEAST(%(burst)s, b.tokens + GREATEST(0, %(now)s - b.at) * %(rate)s) END,
    granted = LEAST(%(burst)s, b.tokens + GREATEST(0, %(now)s - b.at) * %(rate)s) >= 1,
    at = GREATEST(b.at, %(now)s)
RETURNING granted, tokens
"""


class SharedRateLimiter:
    """`rate` requests per second sustained, `burst` at once, per key, counted across the cluster."""

    def __init__(self, db: Postgres, rate: float, burst: float, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.rate = rate
        self.burst = burst
        self.clock = clock

    def take(self, key: str) -> float:
        """0 when allowed; otherwise the seconds until a request would be."""
        row = self.db.fetchone(_TAKE, {"key": key, "burst": float(self.burst), "rate": float(self.rate),
                                       "now": self.clock()})
        if row is None or row[0]:
            return 0.0
        return (1 - row[1]) / self.rate

    def close(self) -> None:
        postgres.release(self.db)
