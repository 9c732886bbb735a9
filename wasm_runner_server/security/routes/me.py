"""Who the caller is: the workspace, key, member and role a request acts for (what a console or client shows)."""

from __future__ import annotations

import msgspec
from aiohttp import web

from wasm_runner_server.http.bodies import json_response
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.security.access import access_of
from wasm_runner_server.security.authenticators import OAUTH_KEY_PREFIX
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.security.tenants import KEY_PREFIX

routes = web.RouteTableDef()


class Caller(msgspec.Struct, kw_only=True):
    workspace: str
    key_prefix: str
    """The public prefix of the key the request carried (or the link's key)."""
    kind: str
    """member, app, admin or link."""
    member: str | None = None
    """The person the key acts for; None for app keys, links and keys made without one."""
    scopes: list[str] | None = None
    """An OAuth access token's scopes (its key_prefix is then `oauth:<grant id>`); None for keys."""
    role: str | None = None
    """The member's role in the workspace (None: the operator's admin key, app keys, links)."""
    operator: bool = False
    """A service-wide admin key: every permission in every workspace."""
    permissions: list[str] = []
    """The permissions held in the workspace (see the roles guide)."""


@routes.get("/v1/me")
@operation(summary="The caller: workspace, key prefix, kind, member, role and permissions", tag="admin",
           response=Caller)
async def me(request: web.Request) -> web.Response:
    principal = principal_of(request)
    key_id = principal.key_id.removeprefix("link:")
    prefix = key_id if key_id.startswith(OAUTH_KEY_PREFIX) else KEY_PREFIX + key_id
    access = access_of(principal, request.app[SECURITY].tenants)
    return json_response(Caller(workspace=principal.workspace, key_prefix=prefix, kind=principal.kind,
                                member=principal.member,
                                scopes=sorted(principal.scopes) if principal.scopes is not None else None,
                                role=access.role, operator=access.operator, permissions=sorted(access.permissions)))
