"""Usage metering: what each workspace used, attributed to whoever pays, aggregated per day.

One row per (workspace, payer, UTC day, unit) holds a running sum, so the table grows with the
days and the payers, never with the calls. Amounts are added in memory (`add`, from any thread)
and written in one transaction per `flush` (the policy flushes every `auth.usage.flush_interval_s`
and at stop; a kill of the process loses at most that much usage). Reads flush first, so they see
everything added.

The payer is generic: `payer_kind` "key" with the API key's id for calls made with a key (the
developer's key pays; its kind, member/app/admin, is kept beside it), "workspace" for what no key
caused (shared/'s stored bytes), and room for "member" (an OAuth token's authorizing member) later.

Units: `executions` (count), `cpu_seconds` and `wall_seconds` (measured by the host for each
execution), `process_seconds` (background processes and native runs), `byte_hours` (a session's
stored bytes, sampled on a timer), `egress_bytes` (sent plus received through the egress proxy
or the host's HTTP client). Budgets are per workspace and unit, over the current UTC month.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import get_args

from wasm_runner_protocol.usage import UsageGrouping, UsageUnit
from wasm_runner_server.metadata.sql import Sql, SqliteSql, open_sqlite

DB_NAME = "usage.sqlite3"
Unit = UsageUnit
UNITS: tuple[str, ...] = get_args(UsageUnit)
GroupBy = UsageGrouping

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    workspace TEXT NOT NULL,
    payer_kind TEXT NOT NULL,         -- key | workspace | member (an OAuth token's authorizing member)
    payer_id TEXT NOT NULL,           -- the key id, the member's id, or "shared"
    key_kind TEXT NOT NULL,           -- member | app | admin | link for a key; "" otherwise
    day TEXT NOT NULL,                -- YYYY-MM-DD, UTC
    unit TEXT NOT NULL,
    amount DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (workspace, payer_kind, payer_id, key_kind, day, unit)
);
CREATE INDEX IF NOT EXISTS usage_by_day ON usage (workspace, unit, day);
CREATE TABLE IF NOT EXISTS usage_budgets (
    workspace TEXT NOT NULL,
    unit TEXT NOT NULL,
    amount DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (workspace, unit)
);
"""

_ADD = ("INSERT INTO usage (workspace, payer_kind, payer_id, key_kind, day, unit, amount) VALUES (?,?,?,?,?,?,?) "
        "ON CONFLICT (workspace, payer_kind, payer_id, key_kind, day, unit) "
        "DO UPDATE SET amount = usage.amount + excluded.amount")


@dataclass(frozen=True)
class Payer:
    workspace: str
    kind: str
    """key | workspace | member"""
    id: str
    key_kind: str = ""


@dataclass(frozen=True)
class UsageFilter:
    workspace: str | None = None
    """None: every workspace (admin)."""
    key: str | None = None
    member: str | None = None
    """A member: an OAuth token's authorizing member, or a member key's id."""
    unit: str | None = None
    since: date | None = None
    until: date | None = None
    """Inclusive."""


@dataclass(frozen=True)
class UsageRow:
    workspace: str
    unit: str
    amount: float
    day: str | None = None
    payer_kind: str | None = None
    payer_id: str | None = None
    key_kind: str | None = None


def day_of(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).date().isoformat()


def month_start(at: float) -> str:
    """The first day of `at`'s UTC month: a budget counts usage since then."""
    return datetime.fromtimestamp(at, tz=UTC).date().replace(day=1).isoformat()


class UsageLedger:
    def __init__(self, path: str | Path | None = None, *, sql: Sql | None = None,
                 on_close: Callable[[], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        """The ledger in the SQLite file at `path`, or on `sql` (the cluster's database, migrated there)."""
        self._on_close = on_close
        if sql is None:
            if path is None:
                raise ValueError("a usage ledger needs a path or a database")
            sql, self._on_close = open_sqlite(Path(path), SCHEMA, "usage")
        self._db = sql
        self.clock = clock
        self._lock = threading.Lock()
        self._db_lock = threading.Lock()
        self._pending: dict[tuple[str, str, str, str, str, str], float] = {}
        self.totals: dict[str, float] = dict.fromkeys(UNITS, 0.0)
        """What this process added since it started, per unit (the /metrics counters)."""

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> UsageLedger:
        return cls(Path(data_dir) / DB_NAME)

    def close(self) -> None:
        self.flush()
        if self._on_close is not None:
            self._on_close()

    # -- writing --------------------------------------------------------------------------------

    def add(self, payer: Payer, unit: str, amount: float, at: float | None = None) -> None:
        """Count `amount` of `unit` for `payer` on the day of `at` (now by default); any thread."""
        if unit not in UNITS:
            raise ValueError(f"unknown usage unit {unit!r}")
        if amount <= 0:
            return
        key = (payer.workspace, payer.kind, payer.id, payer.key_kind, day_of(self.clock() if at is None else at), unit)
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + amount
            self.totals[unit] += amount

    def flush(self) -> None:
        """Add the pending amounts to their rows, in one transaction (a failure keeps them pending)."""
        with self._db_lock:
            with self._lock:
                pending, self._pending = self._pending, {}
            if not pending:
                return
            try:
                self._add_rows([(*key, amount) for key, amount in pending.items()])
            except BaseException:
                with self._lock:
                    for key, amount in pending.items():
                        self._pending[key] = self._pending.get(key, 0.0) + amount
                raise

    def _add_rows(self, rows: list[tuple]) -> None:
        db = self._db
        if isinstance(db, SqliteSql):
            with db.db:
                db.db.execute("BEGIN")
                db.db.executemany(_ADD, rows)
        else:
            for row in rows:  # a handful per flush: one per (payer, unit) active since the last
                db.run(_ADD, row)

    # -- reading ---------------------------------------------------------------------------------

    def query(self, filters: UsageFilter, group_by: GroupBy = "day") -> list[UsageRow]:
        """The sums matching `filters`, grouped by day, by payer, or by unit alone (always per
        workspace and unit: amounts of different units never add up)."""
        self.flush()
        where, args = self._where(filters)
        groups = {"day": ["workspace", "day", "unit"],
                  "key": ["workspace", "payer_kind", "payer_id", "key_kind", "unit"],
                  "unit": ["workspace", "unit"]}[group_by]
        columns = ", ".join(groups)
        sql = f"SELECT {columns}, SUM(amount) FROM usage{where} GROUP BY {columns} ORDER BY {columns}"
        with self._db_lock:
            rows = self._db.rows(sql, args)
        return [UsageRow(**dict(zip([*groups, "amount"], row, strict=True))) for row in rows]

    @staticmethod
    def _where(filters: UsageFilter) -> tuple[str, list]:
        where: list[str] = []
        args: list = []
        if filters.workspace is not None:
            where.append("workspace = ?")
            args.append(filters.workspace)
        if filters.key is not None:
            where.append("payer_kind = 'key' AND payer_id = ?")
            args.append(filters.key)
        if filters.member is not None:
            where.append("((payer_kind = 'member' AND payer_id = ?) OR "
                         "(payer_kind = 'key' AND key_kind = 'member' AND payer_id = ?))")
            args += [filters.member, filters.member]
        if filters.unit is not None:
            where.append("unit = ?")
            args.append(filters.unit)
        if filters.since is not None:
            where.append("day >= ?")
            args.append(filters.since.isoformat())
        if filters.until is not None:
            where.append("day <= ?")
            args.append(filters.until.isoformat())
        return (" WHERE " + " AND ".join(where) if where else ""), args

    def used_this_month(self, workspace: str, units: Iterable[str]) -> dict[str, float]:
        """What `workspace` used of each of `units` since the start of the UTC month (pending included)."""
        wanted = list(units)
        if not wanted:
            return {}
        since = month_start(self.clock())
        marks = ",".join("?" * len(wanted))
        used = dict.fromkeys(wanted, 0.0)
        with self._db_lock:
            rows = self._db.rows(f"SELECT unit, SUM(amount) FROM usage WHERE workspace = ? AND day >= ? "
                                 f"AND unit IN ({marks}) GROUP BY unit", [workspace, since, *wanted])
        for unit, amount in rows:
            used[unit] += amount
        with self._lock:
            for (ws, _, _, _, day, unit), amount in self._pending.items():
                if ws == workspace and unit in used and day >= since:
                    used[unit] += amount
        return used

    # -- budgets ---------------------------------------------------------------------------------

    def budgets(self, workspace: str) -> dict[str, float]:
        """The budgets set for `workspace` through the API (units without one are not in it)."""
        with self._db_lock:
            rows = self._db.rows("SELECT unit, amount FROM usage_budgets WHERE workspace = ?", (workspace,))
        return dict(rows)

    def set_budget(self, workspace: str, unit: str, amount: float | None) -> None:
        """Set `workspace`'s budget of `unit` (None: remove it, the configured default applies again)."""
        if unit not in UNITS:
            raise ValueError(f"unknown usage unit {unit!r}")
        with self._db_lock:
            self._db.run("DELETE FROM usage_budgets WHERE workspace = ? AND unit = ?", (workspace, unit))
            if amount is not None:
                self._db.run("INSERT INTO usage_budgets (workspace, unit, amount) VALUES (?,?,?)",
                             (workspace, unit, amount))
