"""GET /v1/audit: the caller's workspace's audit rows, filtered, with cursor pagination (read-only).

With `audit.read` every row of the workspace; with `audit.own` only those of the caller's own calls (a
member's: made with any key acting for them; an app key's: its own)."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

import msgspec
from aiohttp import web
from msgspec import Meta

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, not_found
from wasm_runner_server.http.bodies import json_response, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.security.access import Grant, grant_of
from wasm_runner_server.security.audit import AuditFilter
from wasm_runner_server.security.authenticators import OAUTH_KEY_PREFIX
from wasm_runner_server.security.state import SECURITY

routes = web.RouteTableDef()


class AuditQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    session: Annotated[str, Meta(max_length=64)] | None = None
    key_id: Annotated[str, Meta(max_length=64)] | None = None
    kind: Literal["exec", "file", "artifact", "packages", "policy", "process", "session", "tool", "admin"] | None = None
    outcome: Annotated[str, Meta(max_length=32)] | None = None
    since: float | None = None
    """Unix time; rows at or after it."""
    until: float | None = None
    workspace: Annotated[str, Meta(max_length=64)] | None = None
    """The operator only: another workspace."""
    cursor: Annotated[str, Meta(max_length=64)] | None = None
    limit: Annotated[int, Meta(ge=1, le=1000)] = 100


class AuditEntry(msgspec.Struct, kw_only=True):
    id: int
    ts: float
    kind: str
    workspace: str
    key_id: str
    session: str | None = None
    ephemeral: bool = False
    mode: str | None = None
    profile: str | None = None
    provider: str | None = None
    language: str | None = None
    code: str | None = None
    code_sha256: str | None = None
    code_bytes: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    stdout_bytes: int | None = None
    stderr_bytes: int | None = None
    exit_code: int | None = None
    outcome: str | None = None
    limit_hit: str | None = None
    duration_ms: float | None = None
    fuel: int | None = None
    peak_memory: int | None = None
    files_changed: str | None = None
    path: str | None = None
    status: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    network: str | None = None
    """exec: the run's egress decisions as JSON (NetworkEvent objects; counts only for an ephemeral session)."""


class AuditPage(msgspec.Struct, kw_only=True):
    entries: list[AuditEntry]
    next_cursor: str | None = None


def _entry(row: dict) -> AuditEntry:
    return AuditEntry(**{**row, "ephemeral": bool(row["ephemeral"])})


def _decode(cursor: str) -> int:
    try:
        return int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().removeprefix("a:"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiError(400, ErrorCode.INVALID_CURSOR, "the cursor is not one this server returned",
                       "pass next_cursor from the previous page unchanged") from None


def _encode(entry_id: int) -> str:
    return base64.urlsafe_b64encode(f"a:{entry_id}".encode()).decode().rstrip("=")


def _own_keys(request: web.Request, grant: Grant) -> tuple[str, ...] | None:
    """The keys whose rows the caller reads (None: all of the workspace's): a member's keys and the OAuth
    grants acting for them."""
    if grant.whole:
        return None
    principal = grant.access.principal
    if principal.member is None:
        return (principal.key_id,)
    security = request.app[SECURITY]
    keys = [k.id for k in security.tenants.keys(principal.workspace)
            if k.member == principal.member and k.kind == principal.kind]
    grants = [OAUTH_KEY_PREFIX + g.id for g in security.oauth.grants(principal.workspace, principal.member)]
    return (*keys, *grants)


@routes.get("/v1/audit")
@operation(summary="Audit rows of the caller's workspace (executions, file changes, admin changes), oldest first",
           tag="audit", query=AuditQuery, response=AuditPage, errors=(403,), permission="audit.read",
           own="audit.own")
async def list_audit(request: web.Request) -> web.Response:
    security = request.app[SECURITY]
    grant = grant_of(request)
    principal = grant.access.principal
    query = read_query(request, AuditQuery)
    workspace = principal.workspace
    if query.workspace is not None and query.workspace != workspace:
        if not grant.access.operator:
            raise ApiError(403, ErrorCode.ADMIN_ONLY, "only the service's admin key reads another workspace's "
                           "audit log", "leave out workspace")
        workspace = query.workspace
    own = _own_keys(request, grant)
    if own is not None and query.key_id is not None and query.key_id not in own:
        raise ApiError(403, ErrorCode.OWN_ROWS_ONLY, "without audit.read you read only the audit rows of your own "
                       "calls", "leave out key_id, or ask for a role holding audit.read")
    filters = AuditFilter(workspace=workspace, session=query.session, key_id=query.key_id, kind=query.kind,
                          outcome=query.outcome, since=query.since, until=query.until, key_ids=own)
    rows = security.audit.query(filters, after_id=_decode(query.cursor) if query.cursor else None,
                                limit=query.limit + 1)
    more = len(rows) > query.limit
    rows = rows[:query.limit]
    return json_response(AuditPage(entries=[_entry(r) for r in rows],
                                   next_cursor=_encode(rows[-1]["id"]) if more and rows else None))


@routes.get("/v1/audit/{entry}")
@operation(summary="One audit row of the caller's workspace", tag="audit", response=AuditEntry, errors=(403, 404),
           permission="audit.read", own="audit.own")
async def get_audit(request: web.Request) -> web.Response:
    security = request.app[SECURITY]
    grant = grant_of(request)
    principal = grant.access.principal
    raw = request.match_info["entry"]
    row = security.audit.get(int(raw)) if raw.isascii() and raw.isdigit() and len(raw) < 19 else None
    own = _own_keys(request, grant)
    if row is None or row["workspace"] != principal.workspace or (own is not None and row["key_id"] not in own):
        raise not_found(ErrorCode.AUDIT_ENTRY_NOT_FOUND, raw)
    return json_response(_entry(row))
