"""The admin API (admin keys only): workspaces and their API keys. A key is shown once, at creation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

import msgspec
from aiohttp import web
from msgspec import Meta

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, not_found
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.security.tenants import WORKSPACE_PATTERN, KeyRecord

routes = web.RouteTableDef()

WorkspaceName = Annotated[str, Meta(pattern=WORKSPACE_PATTERN)]


class KeyCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    workspace: WorkspaceName
    name: Annotated[str, Meta(min_length=1, max_length=128)]
    kind: Literal["member", "app", "admin"] = "member"


class KeyInfo(msgspec.Struct, kw_only=True):
    prefix: str
    workspace: str
    name: str
    kind: str
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
                created_at=_time(record.created_at), last_used_at=_time(record.last_used_at),
                revoked_at=_time(record.revoked_at))


def require_admin(request: web.Request) -> None:
    if principal_of(request).kind != "admin":
        raise ApiError(403, ErrorCode.ADMIN_ONLY, "this endpoint needs an admin key",
                       "create one with `wasm-runner keys create --kind admin`")


@routes.get("/v1/admin/workspaces")
@operation(summary="Workspaces and their active key counts (admin)", tag="admin", response=WorkspaceList,
           errors=(403,))
async def list_workspaces(request: web.Request) -> web.Response:
    require_admin(request)
    rows = request.app[SECURITY].tenants.workspaces()
    return json_response(WorkspaceList(workspaces=[WorkspaceInfo(name=n, created_at=datetime.fromtimestamp(c, tz=UTC),
                                                                 active_keys=k)
                                                   for n, c, k in rows]))


@routes.post("/v1/admin/keys")
@operation(summary="Create an API key (admin); the key is in this response only", tag="admin", body=KeyCreate,
           response=NewKey, status=201, errors=(403, 422))
async def create_key(request: web.Request) -> web.Response:
    require_admin(request)
    body = await read_json(request, KeyCreate)
    key, record = request.app[SECURITY].tenants.create_key(body.workspace, body.name, body.kind)
    return json_response(NewKey(key=key, **key_info(record)), status=201)


@routes.get("/v1/admin/keys")
@operation(summary="List API keys: prefix, name, kind, created, last used, revoked (admin)", tag="admin",
           query=KeyListQuery, response=KeyList, errors=(403,))
async def list_keys(request: web.Request) -> web.Response:
    require_admin(request)
    query = read_query(request, KeyListQuery)
    records = request.app[SECURITY].tenants.keys(query.workspace)
    return json_response(KeyList(keys=[KeyInfo(**key_info(r)) for r in records]))


@routes.delete("/v1/admin/keys/{key}")
@operation(summary="Revoke an API key by its prefix (admin); refused from the next request on", tag="admin",
           response=KeyInfo, errors=(403, 404))
async def revoke_key(request: web.Request) -> web.Response:
    require_admin(request)
    record = request.app[SECURITY].tenants.revoke(request.match_info["key"])
    if record is None:
        raise not_found(ErrorCode.KEY_NOT_FOUND, request.match_info["key"], "GET /v1/admin/keys lists the active keys")
    return json_response(KeyInfo(**key_info(record)))
