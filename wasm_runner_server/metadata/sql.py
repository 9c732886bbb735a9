"""The few statements the tenant store and the audit log run, over SQLite or PostgreSQL alike.

The stores write their SQL once, with `?` placeholders; `PostgresSql` turns them into psycopg's `%s`.
The two statements whose spelling differs (insert-or-ignore, upsert) are methods of their own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wasm_runner_server.wal import Checkpointer, connect_wal

if TYPE_CHECKING:
    from wasm_runner_server.metadata.postgres import Postgres


def _errors() -> tuple[type[Exception], ...]:
    try:  # psycopg is the `cluster` extra's: one machine runs without it
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


ERRORS = _errors()
"""What a failed statement raises, on either database."""


def _unreachable() -> tuple[type[Exception], ...]:
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.OperationalError,)  # (the pool's timeout is one too)


UNREACHABLE = _unreachable()
"""What a statement raises when the shared database cannot be reached (down, restarting, too busy)."""


class Sql(Protocol):
    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; the rows it changed."""
        ...

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]: ...

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple | None: ...

    def insert_many(self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]], *,
                    ignore_existing: bool = False) -> int:
        """Insert the rows in one transaction (those whose key exists skipped if `ignore_existing`);
        how many were inserted."""
        ...

    def upsert(self, table: str, key: str, columns: Sequence[str], values: Sequence[Any]) -> None:
        """Insert the row, or replace the one with the same `key`."""
        ...


def _insert(table: str, columns: Sequence[str], mark: str, verb: str = "INSERT") -> str:
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"


class SqliteSql:
    """Statements on one SQLite connection in autocommit (the caller serialises its use if needed)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self.db.execute(sql, args).rowcount

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        return self.db.execute(sql, args).fetchall()

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple | None:
        return self.db.execute(sql, args).fetchone()

    def insert_many(self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]], *,
                    ignore_existing: bool = False) -> int:
        sql = _insert(table, columns, "?", "INSERT OR IGNORE" if ignore_existing else "INSERT")
        with self.db:  # one transaction: BEGIN ... COMMIT
            self.db.execute("BEGIN")
            return self.db.executemany(sql, values).rowcount

    def upsert(self, table: str, key: str, columns: Sequence[str], values: Sequence[Any]) -> None:
        self.db.execute(_insert(table, columns, "?", "INSERT OR REPLACE"), values)


def open_sqlite(path: Path, schema: str, name: str,
                migrate: Callable[[sqlite3.Connection], None] = lambda db: None) -> tuple[SqliteSql, Callable[[], None]]:
    """A store's own SQLite file, in WAL mode with its schema (and `migrate`d: a file made by an older
    release), checkpointed by a thread of its own: (its statements, what closes it)."""
    db = connect_wal(path)  # committed at once, checkpointed apart
    db.executescript(schema)
    migrate(db)
    checkpointer = Checkpointer(path, f"wasm-runner-{name}-checkpoint")

    def close() -> None:
        checkpointer.close()
        db.close()

    return SqliteSql(db), close


class PostgresSql:
    """The same statements on a pooled PostgreSQL database."""

    def __init__(self, db: Postgres) -> None:
        self.db = db

    @staticmethod
    def _marks(sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self.db.execute(self._marks(sql), args)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        return self.db.fetchall(self._marks(sql), args)

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple | None:
        return self.db.fetchone(self._marks(sql), args)

    def insert_many(self, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]], *,
                    ignore_existing: bool = False) -> int:
        sql = _insert(table, columns, "%s") + (" ON CONFLICT DO NOTHING" if ignore_existing else "")
        return self.db.executemany(sql, values)

    def upsert(self, table: str, key: str, columns: Sequence[str], values: Sequence[Any]) -> None:
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c != key)
        self.db.execute(f"{_insert(table, columns, '%s')} ON CONFLICT ({key}) DO UPDATE SET {updates}", values)
