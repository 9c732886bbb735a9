"""`wasm-runner members …` and `wasm-runner roles …`: a workspace's members' roles and custom roles, on the
data directory (the same store a running service reads: a change counts from its next request on).

    wasm-runner members list --workspace acme [--json]
    wasm-runner members set --workspace acme --member alice --role owner
    wasm-runner members reset --workspace acme --member alice
    wasm-runner roles list --workspace acme [--json]
    wasm-runner roles create --workspace acme --name auditor --permission audit.read [--permission keys.read]
    wasm-runner roles update --workspace acme --name auditor --permission audit
    wasm-runner roles delete --workspace acme --name auditor
    wasm-runner roles permissions

The command line acts as the operator (every permission) and records each change in the audit log as
key `cli`. A running service on the same data directory holds its audit log: changes are then refused
here (nothing is changed) and go through the service's API (/v1/admin/members, /v1/admin/roles).
Their arguments are defined in wasm_runner_server/cli/commands.py (`add_members_command`, `add_roles_command`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from wasm_runner_server.cli.keys import audit_of, tenants_of
from wasm_runner_server.errors import ApiError
from wasm_runner_server.security import permissions
from wasm_runner_server.security.team import CLI_OPERATOR, Team
from wasm_runner_server.security.tenants import MEMBER_PATTERN, WORKSPACE_PATTERN

BUSY = ("a running service holds the audit log of this data directory: make the change through its API "
        "(PUT /v1/admin/members/{member}, POST /v1/admin/roles) with an admin key, or stop it first")


class Refused(Exception):
    """The change was not made (the message says why)."""


@contextmanager
def _team(args: argparse.Namespace, *, changes: bool) -> Iterator[Team]:
    import re

    if not re.match(WORKSPACE_PATTERN, args.workspace):
        raise Refused("a workspace name is 1-64 letters, digits, '-' or '_'")
    if getattr(args, "member", None) is not None and not re.match(MEMBER_PATTERN, args.member):
        raise Refused("a member id is 1-64 letters, digits, '-' or '_'")
    audit = audit_of(args, journal=changes)
    try:
        if changes and not audit.records:
            raise Refused(BUSY)
        tenants = tenants_of(args)
        try:
            yield Team(tenants, audit)
        finally:
            tenants.close()
    finally:
        audit.close()


def _run(name: str, args: argparse.Namespace, action: Callable[[Team], None], *, changes: bool = True) -> int:
    try:
        with _team(args, changes=changes) as team:
            action(team)
    except Refused as exc:
        print(f"wasm-runner {name}: {exc}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print(f"wasm-runner {name}: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        return 1
    return 0


def list_members(args: argparse.Namespace) -> int:
    def show(team: Team) -> None:
        members = team.members(args.workspace)
        if args.json:
            for m in members:
                print(json.dumps({"workspace": args.workspace, "member": m.member, "role": m.role,
                                  "assigned": m.assigned, "updated_at": m.updated_at}))
            return
        print(f"{'MEMBER':<24} {'ROLE':<16} SET")
        for m in members:
            print(f"{m.member:<24} {m.role:<16} {'yes' if m.assigned else 'default'}")

    return _run("members list", args, show, changes=False)


def set_member(args: argparse.Namespace) -> int:
    def change(team: Team) -> None:
        before, after = team.set_role(CLI_OPERATOR, args.workspace, args.member, args.role)
        print(f"{args.member!r} in workspace {args.workspace!r}: {before.role} -> {after.role}", file=sys.stderr)

    return _run("members set", args, change)


def reset_member(args: argparse.Namespace) -> int:
    def change(team: Team) -> None:
        before, after = team.reset(CLI_OPERATOR, args.workspace, args.member)
        print(f"{args.member!r} in workspace {args.workspace!r}: {before.role} -> {after.role}", file=sys.stderr)

    return _run("members reset", args, change)


def list_roles(args: argparse.Namespace) -> int:
    def show(team: Team) -> None:
        rows = [(name, "team", sorted(held), text) for name, (held, text) in permissions.BUILTIN_ROLES.items()]
        rows += [(r.name, "custom", list(r.permissions), r.description) for r in team.tenants.roles.roles(args.workspace)]
        for name, kind, granted, text in rows:
            holders = team.tenants.roles.holders(args.workspace, name)
            if args.json:
                print(json.dumps({"workspace": args.workspace, "name": name, "kind": kind, "permissions": granted,
                                  "description": text, "holders": holders}))
            else:
                print(f"{name} ({kind}): {', '.join(granted) or '-'}" + (f"  [{', '.join(holders)}]" if holders else ""))

    return _run("roles list", args, show, changes=False)


def print_permissions(args: argparse.Namespace) -> int:
    for name, text in permissions.TREE.items():
        print(f"{'  ' * name.count('.')}{name:<{24 - 2 * name.count('.')}} {text}")
    return 0


def create_role(args: argparse.Namespace) -> int:
    def change(team: Team) -> None:
        role = team.create_role(CLI_OPERATOR, args.workspace, args.name, args.permissions, args.description or "")
        print(f"created role {role.name!r} in workspace {args.workspace!r}: {', '.join(role.permissions) or '-'}",
              file=sys.stderr)

    return _run("roles create", args, change)


def update_role(args: argparse.Namespace) -> int:
    def change(team: Team) -> None:
        before, after = team.update_role(CLI_OPERATOR, args.workspace, args.name, args.permissions, args.description)
        print(f"role {args.name!r} in workspace {args.workspace!r}: {', '.join(before.permissions) or '-'} -> "
              f"{', '.join(after.permissions) or '-'}", file=sys.stderr)

    return _run("roles update", args, change)


def delete_role(args: argparse.Namespace) -> int:
    def change(team: Team) -> None:
        team.delete_role(CLI_OPERATOR, args.workspace, args.name)
        print(f"deleted role {args.name!r} of workspace {args.workspace!r}", file=sys.stderr)

    return _run("roles delete", args, change)
