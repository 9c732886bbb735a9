"""One PostgreSQL connection pool per database URL in this process, shared by the stores.

The stores are called the way their SQLite counterparts are: synchronously, from the event loop for
the short writes and reads of a request (a key check, a session's creation) and from threads for the
batches (the audit writer, the sessions' sweep). A pooled connection is taken for each statement or
transaction and given back at once; the connections are in autocommit, a `transaction` is explicit.
The schema is migrated when the pool is first opened (`migrations.migrate`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from wasm_runner_server.metadata.migrations import migrate
from wasm_runner_server.metadata.settings import StoreSettings

log = logging.getLogger("wasm_runner.server")

Error = psycopg.Error


class Postgres:
    """A pool of autocommit connections to one database, its schema migrated."""

    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings
        self.url = settings.url
        self.users = 0
        """The stores using this pool in this process (`acquire`, `release`)."""
        self.pool = ConnectionPool(settings.url, min_size=1, max_size=settings.pool_size, open=False,
                                   kwargs={"autocommit": True, "application_name": "wasm-runner"},
                                   name="wasm-runner-metadata", timeout=settings.connect_timeout_s)
        try:
            self.pool.open(wait=True, timeout=settings.connect_timeout_s)
        except Exception as exc:
            self.pool.close()
            # psycopg's message may quote the connection string: say only where without the password
            raise ConnectionError(f"cannot reach the metadata database {settings.redacted}: "
                                  f"{type(exc).__name__}") from None
        with self.pool.connection() as conn:
            applied = migrate(conn)
        log.info("metadata database open", extra={"event": "metadata_open", "url": settings.redacted,
                                                  "migrations_applied": applied})

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; the rows it changed."""
        with self.pool.connection() as conn:
            return conn.execute(sql, args).rowcount

    def fetchall(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self.pool.connection() as conn:
            return conn.execute(sql, args).fetchall()

    def fetchone(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()) -> tuple | None:
        with self.pool.connection() as conn:
            return conn.execute(sql, args).fetchone()

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """A connection inside one transaction: committed when the block ends, rolled back if it raises."""
        with self.pool.connection() as conn, conn.transaction():
            yield conn

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run a statement for each row, in one transaction; the rows changed."""
        with self.transaction() as conn, conn.cursor() as cur:
            cur.executemany(sql, rows)
            return cur.rowcount


_pools: dict[str, Postgres] = {}
_lock = threading.Lock()


def acquire(settings: StoreSettings) -> Postgres:
    """The process's pool for this URL (opened and migrated by its first user)."""
    with _lock:
        db = _pools.get(settings.url)
        if db is None:
            db = _pools[settings.url] = Postgres(settings)
        db.users += 1
        return db


def release(db: Postgres) -> None:
    """One user done with the pool; the last one closes it."""
    with _lock:
        db.users -= 1
        if db.users <= 0:
            _pools.pop(db.url, None)
            db.pool.close()
