"""What a caller may do, and the one check of it.

Each admin route declares the permission it needs in its `operation(permission=..., own=...)`;
the security policy's middleware calls `authorize` before the handler runs, so a route cannot
forget its check. `own` names a lesser permission that lets a caller without the route's act on
their own records only (their keys, the audit rows of their calls); the handler reads which of
the two was granted from `grant_of(request)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.policy import Principal
from wasm_runner_server.security import permissions
from wasm_runner_server.security.tenants import TenantStore

OPERATOR_HINT = "only the service's admin key does this (`wasm-runner keys create --kind admin`)"


@dataclass(frozen=True)
class Access:
    principal: Principal
    role: str | None
    """The member's role in their workspace (None: the operator, an app key, a link)."""
    permissions: frozenset[str]
    """The leaves held in the caller's workspace (every one for the operator)."""
    operator: bool = False
    """A service-wide admin key: every permission in every workspace."""

    def holds(self, name: str) -> bool:
        return self.operator or permissions.below(name) <= self.permissions

    def covers(self, leaves: frozenset[str]) -> bool:
        """Whether the caller holds all of `leaves` (who may hand out or take away a set of rights)."""
        return self.operator or leaves <= self.permissions

    def scope(self, workspace: str | None) -> str:
        """The workspace a call naming `workspace` acts on: any for the operator, else the caller's own."""
        if workspace is None or workspace == self.principal.workspace:
            return self.principal.workspace
        if not self.operator:
            raise ApiError(403, ErrorCode.PERMISSION_DENIED,
                           f"your permissions hold in workspace {self.principal.workspace!r} only",
                           "leave out the workspace, or ask the service's operator")
        return workspace


@dataclass(frozen=True)
class Grant:
    access: Access
    permission: str
    whole: bool
    """The caller holds the route's permission; False: only its `own` one (their own records)."""


GRANT = web.RequestKey("grant", Grant)


def role_permissions(tenants: TenantStore, workspace: str, role: str) -> frozenset[str]:
    """The leaves a role of `workspace` holds (a team role, or the workspace's custom role)."""
    if permissions.is_builtin(role):
        return permissions.BUILTIN_ROLES[role][0]
    custom = tenants.roles.role(workspace, role)
    return permissions.expand(custom.permissions) if custom is not None else frozenset()


def member_role(tenants: TenantStore, workspace: str, member: str | None) -> str:
    row = tenants.roles.member(workspace, member) if member is not None else None
    return row.role if row is not None else permissions.DEFAULT_ROLE


def access_of(principal: Principal, tenants: TenantStore | None) -> Access:
    """The caller's role and permissions, read afresh (a role change counts from the next request on)."""
    if principal.kind == "admin":
        return Access(principal, None, permissions.LEAVES, operator=True)
    if principal.kind == "app":
        return Access(principal, None, permissions.APP_PERMISSIONS)
    if principal.kind != "member" or tenants is None:
        return Access(principal, None, frozenset())
    role = member_role(tenants, principal.workspace, principal.member)
    return Access(principal, role, role_permissions(tenants, principal.workspace, role))


def denied(access: Access, permission: str, what: str = "") -> ApiError:
    principal = access.principal
    held = f"your role in workspace {principal.workspace!r} is {access.role!r}" if access.role else (
        "an app key holds no role" if principal.kind == "app" else "this caller holds no role")
    hint = ("an owner or admin of the workspace gives your member a role that holds it "
            "(PUT /v1/admin/members/{member} or `wasm-runner members set`)") if principal.kind == "member" else (
        "use a member key whose role holds it")
    return ApiError(403, ErrorCode.PERMISSION_DENIED,
                    f"{what or 'this'} needs the permission {permission!r}; {held}", hint)


def authorize(principal: Principal, tenants: TenantStore | None, permission: str, own: str | None = None) -> Grant:
    """The caller's grant for a route declaring `permission` (and `own`), or a 403 permission_denied."""
    access = access_of(principal, tenants)
    if access.holds(permission):
        return Grant(access, permission, whole=True)
    if own is not None and access.holds(own):
        return Grant(access, own, whole=False)
    raise denied(access, permission)


def grant_of(request: web.Request) -> Grant:
    grant = request.get(GRANT)
    if grant is None:  # a handler asking for a grant its route does not declare: a bug, not a caller's fault
        raise RuntimeError(f"{request.path}: the route declares no permission")
    return grant
