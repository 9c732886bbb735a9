"""Workspace budgets over the usage units, checked before an execution is admitted (like a quota).

A workspace's budget of a unit is the one the admin API set for it, else `[auth.budgets]`'s; it
counts the usage since the start of the UTC month (a change made on another node of a cluster
counts within `CACHE_S`). Once any of its budgets is spent, executions
(and background process starts) are refused with 402 `budget_exhausted`, saying which and how much.
An execution admitted just under a budget may pass it: usage is counted when the work is done.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.security.usage import UNITS, Unit, UsageLedger, month_start

CACHE_S = 5.0
"""How long a workspace's own budgets, as read from the ledger, stand (each execution asks)."""


def budget_exhausted(workspace: str, unit: str, used: float, budget: float, since: str) -> ApiError:
    return ApiError(402, ErrorCode.BUDGET_EXHAUSTED,
                    f"workspace {workspace!r} has used {used:g} {unit} since {since}, its budget for the month is "
                    f"{budget:g}", "ask an administrator to raise the budget (PUT /v1/admin/workspaces/"
                    f"{workspace}/budgets, or [auth.budgets]) or wait for the next month; GET /v1/usage shows "
                    "the usage so far")


class Budgets:
    def __init__(self, ledger: UsageLedger, defaults: Mapping[Unit, float]) -> None:
        self.ledger = ledger
        self.defaults: dict[str, float] = {str(unit): amount for unit, amount in defaults.items()}
        self._own: dict[str, tuple[float, dict[str, float]]] = {}
        """Each workspace's own budgets as last read, and when (time.monotonic())."""

    def of(self, workspace: str) -> dict[str, float]:
        """The workspace's budget per unit: its own, else the configured default (units without either
        are not limited). Its own are read again after CACHE_S (another node may have changed them)."""
        cached = self._own.get(workspace)
        now = time.monotonic()
        if cached is None or now - cached[0] >= CACHE_S:
            cached = self._own[workspace] = (now, self.ledger.budgets(workspace))
        return {**self.defaults, **cached[1]}

    def set(self, workspace: str, unit: str, amount: float | None) -> None:
        """Set (None: remove) the workspace's own budget of `unit`; this node sees it at once."""
        self.ledger.set_budget(workspace, unit, amount)
        self._own.pop(workspace, None)

    def check(self, workspace: str) -> None:
        """Refuse (402) when `workspace` spent any of its budgets this month."""
        budgets = self.of(workspace)
        if not budgets:
            return
        used = self.ledger.used_this_month(workspace, budgets)
        for unit in UNITS:
            if unit in budgets and used[unit] >= budgets[unit]:
                raise budget_exhausted(workspace, unit, used[unit], budgets[unit],
                                       month_start(self.ledger.clock()))
