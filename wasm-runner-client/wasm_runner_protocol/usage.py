"""Usage metering and budgets on the wire: `GET /v1/usage` and `/v1/admin/workspaces/{w}/budgets`."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

UsageUnit = Literal["executions", "cpu_seconds", "wall_seconds", "process_seconds", "byte_hours", "egress_bytes"]
"""executions: a count; cpu/wall seconds: measured by the host per execution; process_seconds: background
processes and native runs; byte_hours: stored bytes × hours; egress_bytes: sent plus received."""
UsageGrouping = Literal["day", "key", "unit"]


class UsageEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    workspace: str
    unit: UsageUnit
    amount: float
    day: str | None = None
    """With group_by=day: the UTC day, YYYY-MM-DD."""
    payer_kind: str | None = None
    """With group_by=key: `key` (an API key pays), `workspace` (shared/'s stored bytes), `member`."""
    payer_id: str | None = None
    key_kind: str | None = None
    """The paying key's kind (member, app, admin)."""


class UsageReport(msgspec.Struct, kw_only=True):
    group_by: UsageGrouping
    entries: list[UsageEntry]


class BudgetState(msgspec.Struct, kw_only=True):
    unit: UsageUnit
    budget: float
    used: float
    """Used since the start of the UTC month."""
    source: Literal["workspace", "config"]
    """Set for this workspace through the admin API, or `[auth.budgets]`'s default."""


class WorkspaceBudgets(msgspec.Struct, kw_only=True):
    workspace: str
    since: str
    """The first day of the current UTC month: budgets count usage from it."""
    budgets: list[BudgetState]


class BudgetsUpdate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    budgets: dict[UsageUnit, Annotated[float, Meta(ge=0)] | None]
    """A budget per unit for the month; null removes the workspace's own (the configured default applies)."""
