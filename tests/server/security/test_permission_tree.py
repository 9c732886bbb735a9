"""The permission tree is well formed and the team roles nest: owner over admin over member."""

from __future__ import annotations

from wasm_runner_server.security import permissions
from wasm_runner_server.security.permissions import BUILTIN_ROLES, LEAVES, TREE


def test_every_permission_has_its_parent_before_it_and_says_what_it_allows():
    names = list(TREE)
    for index, name in enumerate(names):
        parent = name.rpartition(".")[0]
        assert not parent or parent in names[:index], name
        assert TREE[name].strip(), name


def test_a_parent_grants_everything_below_it_and_nothing_else():
    assert permissions.expand(["keys"]) == {"keys.read", "keys.create", "keys.revoke", "keys.own"}
    assert permissions.expand(["keys.own", "audit"]) == {"keys.own", "audit.read", "audit.own"}
    assert permissions.expand(["key"]) == frozenset()  # a prefix that is not a node grants nothing
    assert permissions.expand(["nope"]) == frozenset() and permissions.unknown(["nope", "keys"]) == ["nope"]


def test_owner_holds_everything_admin_less_roles_member_only_their_own():
    owner, admin, member = (BUILTIN_ROLES[name][0] for name in ("owner", "admin", "member"))
    assert owner == LEAVES and member < admin < owner
    assert owner - admin == {"roles.manage"}
    assert all(name.endswith(".own") for name in member)
    assert permissions.APP_PERMISSIONS < member


def test_custom_role_names_are_lower_case_and_not_a_team_roles():
    assert permissions.valid_role_name("auditor") and permissions.valid_role_name("key-keeper_2")
    for name in ("owner", "Auditor", "2fa", "", "a" * 64, "a b", "auditor\n"):
        assert not permissions.valid_role_name(name), name
