"""Changes to a workspace's members and custom roles: who may make each, and the audit row it leaves.

The API and the CLI both go through `Team`. The rule against escalation: a caller hands out or takes
away only rights they hold themselves, so setting a member's role needs every permission of the role
they have and of the role they get, and a custom role is made, changed or deleted only by a caller
holding all its permissions (the operator holds all). A workspace that has an owner keeps one.
"""

from __future__ import annotations

from dataclasses import dataclass

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, not_found
from wasm_runner_server.http.policy import Principal
from wasm_runner_server.security import permissions
from wasm_runner_server.security.access import Access, member_role, role_permissions
from wasm_runner_server.security.audit import AuditLog
from wasm_runner_server.security.roles import CustomRole
from wasm_runner_server.security.tenants import KEY_PREFIX, TenantStore

ROLES_HINT = "GET /v1/admin/roles (or `wasm-runner roles list`) lists the workspace's roles"
CLI_OPERATOR = Access(Principal("", "cli", "admin"), None, permissions.LEAVES, operator=True)
"""Who the command line acts as: the operator, on the data directory (recorded as key `cli`)."""


@dataclass(frozen=True)
class Member:
    member: str
    role: str
    assigned: bool
    """The role was set (False: the default role of a member seen only on a key)."""
    created_at: float | None = None
    updated_at: float | None = None


def who(access: Access) -> dict:
    principal = access.principal
    key = KEY_PREFIX + principal.key_id if principal.key_id != "cli" else "cli"
    return {"key": key, "member": principal.member, "kind": principal.kind}


class Team:
    def __init__(self, tenants: TenantStore, audit: AuditLog) -> None:
        self.tenants = tenants
        self.audit = audit

    # -- reading -------------------------------------------------------------------------------

    def members(self, workspace: str) -> list[Member]:
        """Every member with a role set, and every member a key of the workspace acts for."""
        found = {row.member: Member(row.member, row.role, True, row.created_at, row.updated_at)
                 for row in self.tenants.roles.members(workspace)}
        for key in self.tenants.keys(workspace, include_revoked=False):
            if key.member is not None and key.member not in found:
                found[key.member] = Member(key.member, permissions.DEFAULT_ROLE, False)
        return [found[name] for name in sorted(found)]

    def member(self, workspace: str, member: str) -> Member:
        row = self.tenants.roles.member(workspace, member)
        if row is None:
            return Member(member, permissions.DEFAULT_ROLE, False)
        return Member(member, row.role, True, row.created_at, row.updated_at)

    def role_permissions(self, workspace: str, role: str) -> frozenset[str]:
        return role_permissions(self.tenants, workspace, role)

    def custom_role(self, workspace: str, name: str) -> CustomRole:
        role = self.tenants.roles.role(workspace, name)
        if role is None:
            raise not_found(ErrorCode.ROLE_NOT_FOUND, name, ROLES_HINT)
        return role

    # -- members -------------------------------------------------------------------------------

    def set_role(self, actor: Access, workspace: str, member: str, role: str) -> tuple[Member, Member]:
        """Give `member` the role `role` (None: back to the default); (before, after)."""
        if not permissions.is_builtin(role):
            self.custom_role(workspace, role)
        before = self.member(workspace, member)
        self._may_change(actor, workspace, member, before.role, role)
        self.tenants.ensure_workspace(workspace)
        self.tenants.roles.set_member(workspace, member, role)
        after = self.member(workspace, member)
        self._record(actor, workspace, "member_role", member, {"role": before.role}, {"role": after.role})
        return before, after

    def reset(self, actor: Access, workspace: str, member: str) -> tuple[Member, Member]:
        """Take away the member's role: they hold the default role again; (before, after)."""
        before = self.member(workspace, member)
        self._may_change(actor, workspace, member, before.role, permissions.DEFAULT_ROLE)
        if self.tenants.roles.remove_member(workspace, member):
            self._record(actor, workspace, "member_reset", member, {"role": before.role},
                         {"role": permissions.DEFAULT_ROLE})
        return before, self.member(workspace, member)

    def _may_change(self, actor: Access, workspace: str, member: str, current: str, role: str) -> None:
        needed = self.role_permissions(workspace, current) | self.role_permissions(workspace, role)
        if not actor.covers(needed):
            lacking = ", ".join(sorted(needed - actor.permissions))
            raise ApiError(403, ErrorCode.PERMISSION_DENIED,
                           f"changing {member!r} from role {current!r} to {role!r} needs every permission of both "
                           f"roles; you lack {lacking}", "ask an owner of the workspace")
        if current == "owner" and role != "owner" and not actor.operator and \
                self.tenants.roles.holders(workspace, "owner") == [member]:
            raise ApiError(409, ErrorCode.LAST_OWNER, f"{member!r} is the last owner of workspace {workspace!r}",
                           "make another member owner first")

    # -- custom roles --------------------------------------------------------------------------

    def create_role(self, actor: Access, workspace: str, name: str, granted: list[str],
                    description: str) -> CustomRole:
        if not permissions.valid_role_name(name):
            raise ApiError(422, ErrorCode.VALIDATION_ERROR,
                           f"a custom role's name is 1-63 lower-case letters, digits, '-' or '_', starting with a "
                           f"letter, and not one of {', '.join(permissions.BUILTIN_ROLES)}", ROLES_HINT)
        self._may_grant(actor, granted)
        self.tenants.ensure_workspace(workspace)
        if not self.tenants.roles.create_role(workspace, name, tuple(granted), description):
            raise ApiError(409, ErrorCode.ROLE_EXISTS, f"workspace {workspace!r} has a role {name!r} already",
                           f"change it with PUT /v1/admin/roles/{name}")
        role = self.custom_role(workspace, name)
        self._record(actor, workspace, "role_create", name, None, _shown(role))
        return role

    def update_role(self, actor: Access, workspace: str, name: str, granted: list[str],
                    description: str | None) -> tuple[CustomRole, CustomRole]:
        before = self._custom(workspace, name)
        self._may_grant(actor, [*before.permissions, *granted])
        self.tenants.roles.update_role(workspace, name, tuple(granted),
                                       before.description if description is None else description)
        after = self.custom_role(workspace, name)
        self._record(actor, workspace, "role_update", name, _shown(before), _shown(after))
        return before, after

    def delete_role(self, actor: Access, workspace: str, name: str) -> CustomRole:
        before = self._custom(workspace, name)
        self._may_grant(actor, list(before.permissions))
        holders = self.tenants.roles.holders(workspace, name)
        if holders:
            raise ApiError(409, ErrorCode.ROLE_IN_USE, f"role {name!r} is held by {', '.join(holders)}",
                           "give them another role first (PUT /v1/admin/members/{member})")
        self.tenants.roles.delete_role(workspace, name)
        self._record(actor, workspace, "role_delete", name, _shown(before), None)
        return before

    def _custom(self, workspace: str, name: str) -> CustomRole:
        if permissions.is_builtin(name):
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"{name!r} is a team role: its rights are fixed",
                           "create a custom role with POST /v1/admin/roles")
        return self.custom_role(workspace, name)

    def _may_grant(self, actor: Access, granted: list[str]) -> None:
        bad = permissions.unknown(granted)
        if bad:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"unknown permission {', '.join(map(repr, bad))}",
                           "the permissions are listed by GET /v1/admin/roles and in the roles guide")
        leaves = permissions.expand(granted)
        if not actor.covers(leaves):
            lacking = ", ".join(sorted(leaves - actor.permissions))
            raise ApiError(403, ErrorCode.PERMISSION_DENIED,
                           f"a role is made, changed or deleted only by a caller holding all its permissions; you "
                           f"lack {lacking}", "ask an owner of the workspace")

    def _record(self, actor: Access, workspace: str, action: str, target: str, before: dict | None,
                after: dict | None) -> None:
        self.audit.record_admin(workspace=workspace, key_id=actor.principal.key_id, action=action, target=target,
                                change={"by": who(actor), "from": before, "to": after})

    def record_key(self, actor: Access, workspace: str, action: str, prefix: str, before: dict | None,
                   after: dict | None) -> None:
        """A key created or revoked through the API or the CLI."""
        self._record(actor, workspace, action, prefix, before, after)

    def record_budgets(self, actor: Access, workspace: str, before: dict[str, float], after: dict[str, float]) -> None:
        """A workspace's own budgets changed (units and amounts, before and after)."""
        if before != after:
            self._record(actor, workspace, "budgets_set", workspace, before, after)

    # -- keys: whom a caller may act for -------------------------------------------------------

    def may_act_for(self, actor: Access, workspace: str, kind: str, member: str | None, what: str) -> None:
        """A key for `member` (or an app key) is made or revoked by a caller holding all the rights it
        carries: whoever holds a key acts as its member. A service-wide admin key is the operator's only."""
        if kind == "admin" and not actor.operator:
            raise ApiError(403, ErrorCode.ADMIN_ONLY, f"{what} a service-wide admin key is the operator's only",
                           "make a member key and give its member a role")
        if actor.operator:
            return
        carried = permissions.APP_PERMISSIONS if kind == "app" else self.role_permissions(
            workspace, member_role(self.tenants, workspace, member))
        if not actor.covers(carried):
            lacking = ", ".join(sorted(carried - actor.permissions))
            raise ApiError(403, ErrorCode.PERMISSION_DENIED,
                           f"{what} a key acting for {member or 'an app'!r} needs every permission it carries; you "
                           f"lack {lacking}", "ask an owner of the workspace")


def _shown(role: CustomRole) -> dict:
    return {"permissions": list(role.permissions), "description": role.description}
