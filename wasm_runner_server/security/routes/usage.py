"""GET /v1/usage (what a workspace used, per day, payer or unit; JSON or CSV) and the admin API of
workspace budgets."""

from __future__ import annotations

import csv
import io
from datetime import date
from typing import Annotated, Literal

import msgspec
from aiohttp import web
from msgspec import Meta

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.usage import (
    BudgetState,
    BudgetsUpdate,
    UsageEntry,
    UsageGrouping,
    UsageReport,
    WorkspaceBudgets,
)
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.security.access import grant_of
from wasm_runner_server.security.routes.admin import WorkspaceName
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.security.usage import Unit, UsageFilter, month_start

routes = web.RouteTableDef()

KeyId = Annotated[str, Meta(max_length=64)]


class UsageQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    workspace: WorkspaceName | None = None
    """Admin keys: any workspace (default: every one); other keys: their own only (another is a 404)."""
    member: KeyId | None = None
    """A member's usage: an OAuth token's authorizing member, or a member key's id."""
    key: KeyId | None = None
    """One API key's usage, by its id (the part of `wr_<id>_…` before the secret)."""
    unit: Unit | None = None
    from_: date | None = msgspec.field(default=None, name="from")
    """First UTC day included (YYYY-MM-DD)."""
    to: date | None = None
    """Last UTC day included."""
    group_by: UsageGrouping = "day"
    format: Literal["json", "csv"] = "json"
    """csv: the same rows as text/csv (a header line, then one line per row)."""


_CSV_COLUMNS = {"day": ("workspace", "day", "unit", "amount"),
                "key": ("workspace", "payer_kind", "payer_id", "key_kind", "unit", "amount"),
                "unit": ("workspace", "unit", "amount")}


@routes.get("/v1/usage")
@operation(summary="Usage of the caller's workspace (admin: any): executions, CPU/wall/process seconds, "
           "byte-hours, egress bytes, per day, payer or unit", tag="usage", query=UsageQuery, response=UsageReport,
           errors=(403, 404, 422), also_media=("text/csv",), permission="usage.read", own="usage.own",
           description="`?format=csv` answers the same rows as text/csv. With `usage.read` every payer of the "
                       "workspace; with `usage.own`, what the caller's own calls used (a member: their own).")
async def get_usage(request: web.Request) -> web.StreamResponse:
    security = request.app[SECURITY]
    grant = grant_of(request)
    principal = grant.access.principal
    query = read_query(request, UsageQuery)
    workspace: str | None = principal.workspace
    if grant.access.operator:
        workspace = query.workspace
    elif query.workspace is not None and query.workspace != principal.workspace:
        raise ApiError(404, ErrorCode.NOT_FOUND, f"no usage of workspace {query.workspace!r}",
                       "leave out workspace: a key reads its own workspace's usage")
    key, member = query.key, query.member
    if not grant.whole:  # usage.own: what the caller's own calls used (a member's: any key of theirs, or OAuth)
        mine = ("member", principal.member) if principal.member is not None else ("key", principal.key_id)
        if (key is not None and mine != ("key", key)) or (member is not None and mine != ("member", member)):
            raise ApiError(403, ErrorCode.OWN_ROWS_ONLY, "without usage.read you read only the usage of your own calls",
                           "leave out key and member, or ask for a role holding usage.read")
        key, member = (None, principal.member) if principal.member is not None else (principal.key_id, None)
    filters = UsageFilter(workspace=workspace, key=key, member=member, unit=query.unit, since=query.from_,
                          until=query.to)
    rows = security.usage.query(filters, query.group_by)
    entries = [UsageEntry(workspace=r.workspace, unit=r.unit, amount=r.amount, day=r.day,  # type: ignore[arg-type]
                          payer_kind=r.payer_kind, payer_id=r.payer_id, key_kind=r.key_kind) for r in rows]
    if query.format == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        columns = _CSV_COLUMNS[query.group_by]
        writer.writerow(columns)
        for entry in entries:
            writer.writerow([getattr(entry, c) for c in columns])
        return web.Response(text=out.getvalue(), content_type="text/csv",
                            headers={"Content-Disposition": 'attachment; filename="usage.csv"'})
    return json_response(UsageReport(group_by=query.group_by, entries=entries))


def _budgets(request: web.Request, workspace: str) -> WorkspaceBudgets:
    security = request.app[SECURITY]
    own = security.usage.budgets(workspace)
    merged = security.budgets.of(workspace)
    used = security.usage.used_this_month(workspace, merged)
    return WorkspaceBudgets(workspace=workspace, since=month_start(security.usage.clock()), budgets=[
        BudgetState(unit=unit, budget=amount, used=used[unit],  # type: ignore[arg-type]
                    source="workspace" if unit in own else "config")
        for unit, amount in sorted(merged.items())])


@routes.get("/v1/admin/workspaces/{workspace}/budgets")
@operation(summary="A workspace's budgets for the month and what it used of them", tag="admin",
           response=WorkspaceBudgets, errors=(403,), permission="usage.read")
async def get_budgets(request: web.Request) -> web.Response:
    workspace = grant_of(request).access.scope(request.match_info["workspace"])
    return json_response(_budgets(request, workspace))


@routes.put("/v1/admin/workspaces/{workspace}/budgets")
@operation(summary="Set a workspace's budgets per unit for the month; null removes one", tag="admin",
           body=BudgetsUpdate, response=WorkspaceBudgets, errors=(403, 422), permission="quotas.manage")
async def put_budgets(request: web.Request) -> web.Response:
    access = grant_of(request).access
    workspace = access.scope(request.match_info["workspace"])
    body = await read_json(request, BudgetsUpdate)
    security = request.app[SECURITY]
    try:
        security.tenants.ensure_workspace(workspace)
    except ValueError as exc:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, str(exc)) from None
    before = security.usage.budgets(workspace)
    for unit, amount in body.budgets.items():
        security.budgets.set(workspace, unit, amount)
    security.team.record_budgets(access, workspace, before, security.usage.budgets(workspace))
    return json_response(_budgets(request, workspace))
