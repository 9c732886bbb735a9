"""The admin API: workspaces and their API keys. A key is shown once, at creation.

Each route declares its permission (`security.permissions`); the operator's admin key holds every one in
every workspace, a member holds their role's in their own workspace. A member without `keys.create`,
`keys.read` or `keys.revoke` still manages the keys that act for themselves with `keys.own`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec
from aiohttp import web
from msgspec import Meta

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, not_found
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.security.access import Grant, denied, grant_of
from wasm_runner_server.security.key_kinds import KeyKind
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.security.tenants import MEMBER_PATTERN, WORKSPACE_PATTERN, KeyRecord

routes = web.RouteTableDef()

WorkspaceName = Annotated[str, Meta(pattern=WORKSPACE_PATTERN)]


class KeyCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    workspace: WorkspaceName | None = None
    """Default: the caller's (a workspace's own members act in it only; the operator in any)."""
    name: Annotated[str, Meta(min_length=1, max_length=128)]
    kind: KeyKind = "member"
    member: Annotated[str, Meta(pattern=MEMBER_PATTERN)] | None = None
    """The person a member or admin key acts for (several keys may act for one); not for app keys.
    With `keys.own` only: yourself (the default)."""


class KeyInfo(msgspec.Struct, kw_only=True):
    prefix: str
    workspace: str
    name: str
    kind: str
    member: str | None = None
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


class NewKey(KeyInfo, kw_only=True):
    key: str
    """Shown only now; store it safely. A lost key cannot be recovered: revoke it and create another."""


class KeyList(msgspec.Struct, kw_only=True):
    keys: list[KeyInfo]


class KeyListQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    workspace: WorkspaceName | None = None


class WorkspaceInfo(msgspec.Struct, kw_only=True):
    name: str
    created_at: datetime
    active_keys: int


class WorkspaceList(msgspec.Struct, kw_only=True):
    workspaces: list[WorkspaceInfo]


def _time(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def key_info(record: KeyRecord) -> dict:
    return dict(prefix=record.prefix, workspace=record.workspace, name=record.name, kind=record.kind,
                member=record.member, created_at=_time(record.created_at), last_used_at=_time(record.last_used_at),
                revoked_at=_time(record.revoked_at))


def _mine(grant: Grant, record: KeyRecord) -> bool:
    """Whether a key is one the caller manages with `keys.own`: one acting for the caller's member (a key
    made without a member id: that key only)."""
    principal = grant.access.principal
    if record.workspace != principal.workspace:
        return False
    if principal.member is None:
        return record.id == principal.key_id
    return record.kind == "member" and record.member == principal.member


@routes.get("/v1/admin/workspaces")
@operation(summary="Workspaces and their active key counts (the operator: all; others: their own)", tag="admin",
           response=WorkspaceList, errors=(403,), permission="workspaces.read")
async def list_workspaces(request: web.Request) -> web.Response:
    access = grant_of(request).access
    rows = [row for row in request.app[SECURITY].tenants.workspaces()
            if access.operator or row[0] == access.principal.workspace]
    return json_response(WorkspaceList(workspaces=[WorkspaceInfo(name=n, created_at=datetime.fromtimestamp(c, tz=UTC),
                                                                 active_keys=k)
                                                   for n, c, k in rows]))


@routes.post("/v1/admin/keys")
@operation(summary="Create an API key; the key is in this response only", tag="admin", body=KeyCreate,
           response=NewKey, status=201, errors=(403, 422), permission="keys.create", own="keys.own")
async def create_key(request: web.Request) -> web.Response:
    grant = grant_of(request)
    access = grant.access
    body = await read_json(request, KeyCreate)
    workspace = access.scope(body.workspace)
    member = body.member
    security = request.app[SECURITY]
    if not grant.whole:  # keys.own: a member key for yourself
        if access.principal.member is None:
            raise ApiError(403, ErrorCode.PERMISSION_DENIED, "this key acts for no member: it cannot make keys "
                           "for one", "ask an admin for a key made with a member id")
        if body.kind != "member" or member not in (None, access.principal.member):
            raise denied(access, "keys.create", "a key for someone else, or of another kind,")
        member = access.principal.member
    security.team.may_act_for(access, workspace, body.kind, member, "creating")
    try:
        key, record = security.tenants.create_key(workspace, body.name, body.kind, member)
    except ValueError as exc:  # what the schema cannot say: an app key with a member
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, str(exc), "see /openapi.json for the request schema") from None
    security.team.record_key(access, workspace, "key_create", record.prefix, None,
                             {"name": record.name, "kind": record.kind, "member": record.member})
    return json_response(NewKey(key=key, **key_info(record)), status=201)


@routes.get("/v1/admin/keys")
@operation(summary="List API keys: prefix, name, kind, created, last used, revoked", tag="admin",
           query=KeyListQuery, response=KeyList, errors=(403,), permission="keys.read", own="keys.own",
           description="The operator lists every workspace's keys (or one's); a member with keys.read their "
                       "workspace's, with keys.own only those acting for themselves.")
async def list_keys(request: web.Request) -> web.Response:
    grant = grant_of(request)
    query = read_query(request, KeyListQuery)
    workspace = grant.access.scope(query.workspace) if (query.workspace or not grant.access.operator) else None
    records = request.app[SECURITY].tenants.keys(workspace)
    if not grant.whole:
        records = [r for r in records if _mine(grant, r)]
    return json_response(KeyList(keys=[KeyInfo(**key_info(r)) for r in records]))


@routes.delete("/v1/admin/keys/{key}")
@operation(summary="Revoke an API key by its prefix; refused from the next request on", tag="admin",
           response=KeyInfo, errors=(403, 404), permission="keys.revoke", own="keys.own")
async def revoke_key(request: web.Request) -> web.Response:
    grant = grant_of(request)
    access = grant.access
    security = request.app[SECURITY]
    ref = request.match_info["key"]
    key_id = ref.removeprefix("wr_").split("_", 1)[0]
    target = next((k for k in security.tenants.keys(None if access.operator else access.principal.workspace)
                   if k.id == key_id and k.revoked_at is None), None)
    if target is None or not (grant.whole or _mine(grant, target)):  # another workspace's: as if none
        raise not_found(ErrorCode.KEY_NOT_FOUND, ref, "GET /v1/admin/keys lists the active keys")
    security.team.may_act_for(access, target.workspace, target.kind, target.member, "revoking")
    record = security.tenants.revoke(target.id, target.workspace)
    if record is None:  # revoked meanwhile
        raise not_found(ErrorCode.KEY_NOT_FOUND, ref, "GET /v1/admin/keys lists the active keys")
    security.team.record_key(access, record.workspace, "key_revoke", record.prefix,
                             {"name": record.name, "kind": record.kind, "member": record.member}, None)
    return json_response(KeyInfo(**key_info(record)))
