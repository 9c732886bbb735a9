"""The team over HTTP: members' roles (/v1/admin/members) and custom roles (/v1/admin/roles).

A workspace's owners and admins act on their own workspace (the `workspace` query is for the operator);
each change is checked by `security.team` and leaves an audit row (kind `admin`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

import msgspec
from aiohttp import web
from msgspec import Meta

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.security import permissions
from wasm_runner_server.security.access import Access, grant_of
from wasm_runner_server.security.roles import CustomRole
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.security.team import Member, Team
from wasm_runner_server.security.tenants import MEMBER_PATTERN, WORKSPACE_PATTERN

routes = web.RouteTableDef()

PermissionName = Annotated[str, Meta(min_length=1, max_length=64)]
Permissions = Annotated[list[PermissionName], Meta(max_length=64)]


class WorkspaceQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    workspace: Annotated[str, Meta(pattern=WORKSPACE_PATTERN)] | None = None
    """Default: the caller's; another workspace is the operator's only."""


class MemberInfo(msgspec.Struct, kw_only=True):
    member: str
    role: str
    assigned: bool
    """False: the default role of a member known only from a key."""
    created_at: datetime | None = None
    updated_at: datetime | None = None


class MemberList(msgspec.Struct, kw_only=True):
    workspace: str
    members: list[MemberInfo]


class MemberRoleSet(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    role: Annotated[str, Meta(min_length=1, max_length=64)]
    """owner, admin, member, or a custom role of the workspace."""


class MemberChange(msgspec.Struct, kw_only=True):
    workspace: str
    before: MemberInfo
    after: MemberInfo


class RoleInfo(msgspec.Struct, kw_only=True):
    name: str
    builtin: bool
    permissions: list[str]
    """As granted (a parent grants everything below it)."""
    description: str
    holders: list[str]
    """Members with this role set (not those holding the default role by having none)."""


class PermissionInfo(msgspec.Struct, kw_only=True):
    name: str
    description: str


class RoleList(msgspec.Struct, kw_only=True):
    workspace: str
    roles: list[RoleInfo]
    permissions: list[PermissionInfo]
    """The permission tree, parents before their children."""


class RoleCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=63)]
    permissions: Permissions
    description: Annotated[str, Meta(max_length=500)] = ""


class RoleUpdate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    permissions: Permissions
    description: Annotated[str, Meta(max_length=500)] | None = None
    """Default: unchanged."""


def _time(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def member_info(member: Member) -> MemberInfo:
    return MemberInfo(member=member.member, role=member.role, assigned=member.assigned,
                      created_at=_time(member.created_at), updated_at=_time(member.updated_at))


def custom_info(team: Team, role: CustomRole) -> RoleInfo:
    return RoleInfo(name=role.name, builtin=False, permissions=list(role.permissions), description=role.description,
                    holders=team.tenants.roles.holders(role.workspace, role.name))


def _member(request: web.Request) -> str:
    member = request.match_info["member"]
    if not re.match(MEMBER_PATTERN, member):
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "a member id is 1-64 letters, digits, '-' or '_'",
                       "GET /v1/admin/members lists the members")
    return member


def _target(request: web.Request) -> tuple[Access, str]:
    access = grant_of(request).access
    return access, access.scope(read_query(request, WorkspaceQuery).workspace)


@routes.get("/v1/admin/members")
@operation(summary="The workspace's members and their roles", tag="admin", query=WorkspaceQuery,
           response=MemberList, errors=(403,), permission="members.read")
async def list_members(request: web.Request) -> web.Response:
    _, workspace = _target(request)
    team = request.app[SECURITY].team
    return json_response(MemberList(workspace=workspace, members=[member_info(m) for m in team.members(workspace)]))


@routes.put("/v1/admin/members/{member}")
@operation(summary="Set a member's role (audited)", tag="admin", query=WorkspaceQuery, body=MemberRoleSet,
           response=MemberChange, errors=(403, 404, 409, 422), permission="members.manage",
           description="Only to and from roles whose permissions the caller holds; a workspace keeps its last "
                       "owner. The change counts from the member's next request.")
async def set_member_role(request: web.Request) -> web.Response:
    access, workspace = _target(request)
    member = _member(request)
    body = await read_json(request, MemberRoleSet)
    before, after = request.app[SECURITY].team.set_role(access, workspace, member, body.role)
    return json_response(MemberChange(workspace=workspace, before=member_info(before), after=member_info(after)))


@routes.delete("/v1/admin/members/{member}")
@operation(summary="Reset a member to the default role `member` (audited)", tag="admin", query=WorkspaceQuery,
           response=MemberChange, errors=(403, 409, 422), permission="members.manage")
async def reset_member(request: web.Request) -> web.Response:
    access, workspace = _target(request)
    before, after = request.app[SECURITY].team.reset(access, workspace, _member(request))
    return json_response(MemberChange(workspace=workspace, before=member_info(before), after=member_info(after)))


@routes.get("/v1/admin/roles")
@operation(summary="The team roles, the workspace's custom roles and the permission tree", tag="admin",
           query=WorkspaceQuery, response=RoleList, errors=(403,), permission="roles.read")
async def list_roles(request: web.Request) -> web.Response:
    _, workspace = _target(request)
    team = request.app[SECURITY].team
    builtin = [RoleInfo(name=name, builtin=True, permissions=sorted(held), description=text,
                        holders=team.tenants.roles.holders(workspace, name))
               for name, (held, text) in permissions.BUILTIN_ROLES.items()]
    custom = [custom_info(team, role) for role in team.tenants.roles.roles(workspace)]
    return json_response(RoleList(workspace=workspace, roles=builtin + custom,
                                  permissions=[PermissionInfo(name=n, description=d)
                                               for n, d in permissions.TREE.items()]))


@routes.post("/v1/admin/roles")
@operation(summary="Create a custom role from the permission tree (audited)", tag="admin", query=WorkspaceQuery,
           body=RoleCreate, response=RoleInfo, status=201, errors=(403, 409, 422), permission="roles.manage")
async def create_role(request: web.Request) -> web.Response:
    access, workspace = _target(request)
    body = await read_json(request, RoleCreate)
    team = request.app[SECURITY].team
    role = team.create_role(access, workspace, body.name, body.permissions, body.description)
    return json_response(custom_info(team, role), status=201)


@routes.put("/v1/admin/roles/{name}")
@operation(summary="Change a custom role's permissions (audited; its holders' rights change at once)", tag="admin",
           query=WorkspaceQuery, body=RoleUpdate, response=RoleInfo, errors=(403, 404, 422),
           permission="roles.manage")
async def update_role(request: web.Request) -> web.Response:
    access, workspace = _target(request)
    body = await read_json(request, RoleUpdate)
    team = request.app[SECURITY].team
    _, after = team.update_role(access, workspace, request.match_info["name"], body.permissions, body.description)
    return json_response(custom_info(team, after))


@routes.delete("/v1/admin/roles/{name}")
@operation(summary="Delete a custom role no member holds (audited)", tag="admin", query=WorkspaceQuery,
           response=RoleInfo, errors=(403, 404, 409, 422), permission="roles.manage")
async def delete_role(request: web.Request) -> web.Response:
    access, workspace = _target(request)
    team = request.app[SECURITY].team
    before = team.delete_role(access, workspace, request.match_info["name"])
    return json_response(RoleInfo(name=before.name, builtin=False, permissions=list(before.permissions),
                                  description=before.description, holders=[]))
