"""The permission tree, the team roles built from it, and what a set of granted names covers.

Permissions are dotted names (`keys.create`); granting a name grants everything below it (`keys`
grants `keys.create`, `keys.revoke`, ...). `TREE` is the one definition: the admin routes declare
names from it, the custom roles are checked against it, and the guide's table is checked against
`markdown_table()`. A service-wide admin key (the operator) holds every permission in every
workspace; an app key holds `APP_PERMISSIONS`; a member key holds its member's role.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TREE: dict[str, str] = {
    "workspaces": "The workspace itself",
    "workspaces.read": "See the workspace and its active key count (GET /v1/admin/workspaces shows only yours)",
    "keys": "The workspace's API keys",
    "keys.read": "List every key of the workspace (prefix, name, kind, member; never the key)",
    "keys.create": "Create member and app keys for anyone in the workspace whose rights you hold",
    "keys.revoke": "Revoke any key of the workspace whose member's rights you hold",
    "keys.own": "List, create and revoke the keys that act for yourself",
    "apps": "The workspace's OAuth apps (applications acting for members)",
    "apps.read": "List the workspace's OAuth apps (never their secrets)",
    "apps.manage": "Register and delete the workspace's OAuth apps",
    "members": "The workspace's members and their roles",
    "members.read": "List the members and their roles",
    "members.manage": "Set or reset a member's role (only to and from roles whose rights you hold)",
    "roles": "The workspace's custom roles",
    "roles.read": "List the team roles and the custom roles with their permissions",
    "roles.manage": "Create, update and delete custom roles (only with permissions you hold)",
    "audit": "The workspace's audit log",
    "audit.read": "Read every audit row of the workspace",
    "audit.own": "Read the audit rows of your own calls",
    "quotas": "The workspace's quotas and budgets",
    "quotas.manage": "Change the workspace's quotas and budgets",
    "usage": "The workspace's usage",
    "usage.read": "Read the usage of every member and app of the workspace",
    "usage.own": "Read your own usage",
}
"""Every permission, parents before their children, with what it allows."""

LEAVES: frozenset[str] = frozenset(name for name in TREE if not any(o.startswith(name + ".") for o in TREE))
"""The permissions that name one action (what a set of grants is expanded to)."""

ROLE_PATTERN = r"^[a-z][a-z0-9_-]{0,62}\Z"
"""A custom role's name: lower-case, so a role is never two roles by case."""

MEMBER_BASE = frozenset({"keys.own", "audit.own", "usage.own"})
BUILTIN_ROLES: dict[str, tuple[frozenset[str], str]] = {
    "owner": (LEAVES, "Everything in the workspace, including roles and ownership"),
    "admin": (frozenset({"workspaces.read", "keys.read", "keys.create", "keys.revoke", "keys.own", "apps.read", "apps.manage",
                         "members.read",
                         "members.manage", "roles.read", "audit.read", "audit.own", "quotas.manage", "usage.read",
                         "usage.own"}),
              "Keys and members except owners, quotas and budgets, the audit log, everyone's usage"),
    "member": (MEMBER_BASE, "Their own keys, the audit rows of their own calls, their own usage"),
}
"""The team roles: (the permissions, what the role is for)."""
DEFAULT_ROLE = "member"
"""The role of a member without a row (and of a member key made without a member id)."""
APP_PERMISSIONS = frozenset({"audit.own", "usage.own"})
"""An app key acts for an application, not a member: it holds no role, only these."""


def below(name: str) -> frozenset[str]:
    """The leaves `name` grants (itself if it is one)."""
    return frozenset(leaf for leaf in LEAVES if leaf == name or leaf.startswith(name + "."))


def expand(granted: Iterable[str]) -> frozenset[str]:
    """The leaves a set of granted names covers (unknown names cover nothing)."""
    return frozenset().union(*(below(name) for name in granted))


def unknown(names: Iterable[str]) -> list[str]:
    return sorted(set(names) - set(TREE))


def is_builtin(role: str) -> bool:
    return role in BUILTIN_ROLES


def valid_role_name(name: str) -> bool:
    return bool(re.match(ROLE_PATTERN, name)) and not is_builtin(name)


def markdown_table() -> str:
    """The permission tree as the guide shows it: a row per permission, the team roles (and app keys) holding it."""
    lines = ["| Permission | What it allows | owner | admin | member | app key |", "|---|---|---|---|---|---|"]
    for name, text in TREE.items():
        leaves = below(name)
        held = [BUILTIN_ROLES[role][0] for role in ("owner", "admin", "member")] + [APP_PERMISSIONS]
        marks = ["yes" if leaves <= permissions else "" for permissions in held]
        indent = "&nbsp;&nbsp;" * name.count(".")
        lines.append(f"| {indent}`{name}` | {text} | {' | '.join(marks)} |")
    return "\n".join(lines)
