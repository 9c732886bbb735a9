"""Team roles as a workspace uses them: owners and admins manage their own workspace only, nobody hands out
rights they lack, a workspace keeps its last owner, members manage their own keys and read their own audit
rows, custom roles are checked against the tree, and every change leaves an audit row with before and after."""

from __future__ import annotations

import json

from wasm_runner_server.security.tenants import TenantStore


async def _key(secure, member: str, role: str | None, workspace: str = "alpha") -> dict[str, str]:
    """Headers of a new member key of `workspace` acting for `member`, whose role the operator set."""
    if role is not None:
        status, body, _ = await secure.call("PUT", f"/v1/admin/members/{member}?workspace={workspace}", "admin",
                                            json={"role": role})
        assert status == 200, body
    status, body, _ = await secure.call("POST", "/v1/admin/keys", "admin",
                                        json={"workspace": workspace, "name": member, "member": member})
    assert status == 201, body
    return {"Authorization": f"Bearer {body['key']}"}


async def _error(secure, method: str, path: str, headers: dict, **kwargs) -> tuple[int, str, str]:
    status, body, _ = await secure.call(method, path, headers=headers, **kwargs)
    error = body["error"] if isinstance(body, dict) and "error" in body else {"code": "", "message": str(body)}
    return status, error["code"], error["message"]


async def test_an_owner_manages_their_own_workspace_only(secure):
    olga = await _key(secure, "olga", "owner")
    status, body, _ = await secure.call("POST", "/v1/admin/keys", headers=olga, json={"name": "bob", "member": "bob"})
    assert status == 201 and body["workspace"] == "alpha" and body["member"] == "bob"
    for method, path, payload in (("POST", "/v1/admin/keys", {"workspace": "beta", "name": "x"}),
                                  ("GET", "/v1/admin/keys?workspace=beta", None),
                                  ("GET", "/v1/admin/members?workspace=beta", None),
                                  ("PUT", "/v1/admin/members/bob?workspace=beta", {"role": "admin"})):
        status, code, message = await _error(secure, method, path, olga, json=payload)
        assert (status, code) == (403, "permission_denied") and "'alpha' only" in message, (path, message)
    beta_key = TenantStore.in_data_dir(secure.data_dir)
    try:
        beta_prefix = next(k.prefix for k in beta_key.keys("beta"))
    finally:
        beta_key.close()
    assert (await secure.call("DELETE", f"/v1/admin/keys/{beta_prefix}", headers=olga))[0] == 404  # as if none
    status, body, _ = await secure.call("GET", "/v1/admin/workspaces", headers=olga)
    assert status == 200 and [w["name"] for w in body["workspaces"]] == ["alpha"]
    status, code, _ = await _error(secure, "POST", "/v1/admin/keys", olga, json={"name": "root", "kind": "admin"})
    assert (status, code) == (403, "admin_only")  # a service-wide key is the operator's only
    status, body, _ = await secure.call("GET", "/v1/admin/workspaces", "admin")
    assert {w["name"] for w in body["workspaces"]} >= {"alpha", "beta", "ops"}  # the operator sees all


async def test_an_admin_cannot_reach_owners_or_hand_out_more_than_they_hold(secure):
    await _key(secure, "olga", "owner")
    adam = await _key(secure, "adam", "admin")
    assert (await secure.call("PUT", "/v1/admin/members/bob", headers=adam, json={"role": "admin"}))[0] == 200
    for method, path, payload in (("PUT", "/v1/admin/members/bob", {"role": "owner"}),
                                  ("PUT", "/v1/admin/members/olga", {"role": "member"}),
                                  ("DELETE", "/v1/admin/members/olga", None),
                                  ("POST", "/v1/admin/keys", {"name": "as olga", "member": "olga"}),
                                  ("POST", "/v1/admin/roles", {"name": "x", "permissions": []})):
        status, code, message = await _error(secure, method, path, adam, json=payload)
        assert (status, code) == (403, "permission_denied"), (path, message)
    olga_key = (await secure.call("GET", "/v1/admin/keys?workspace=alpha", "admin"))[1]
    olga_prefix = next(k["prefix"] for k in olga_key["keys"] if k["member"] == "olga")
    assert (await _error(secure, "DELETE", f"/v1/admin/keys/{olga_prefix}", adam))[:2] == (403, "permission_denied")
    status, body, _ = await secure.call("POST", "/v1/admin/keys", headers=adam, json={"name": "for bob", "member": "bob"})
    assert status == 201


async def test_a_workspace_keeps_its_last_owner(secure):
    olga = await _key(secure, "olga", "owner")
    status, code, message = await _error(secure, "PUT", "/v1/admin/members/olga", olga, json={"role": "admin"})
    assert (status, code) == (409, "last_owner") and "olga" in message
    assert (await secure.call("PUT", "/v1/admin/members/pat", headers=olga, json={"role": "owner"}))[0] == 200
    status, body, _ = await secure.call("PUT", "/v1/admin/members/olga", headers=olga, json={"role": "admin"})
    assert status == 200 and body["before"]["role"] == "owner" and body["after"]["role"] == "admin"
    status, body, _ = await secure.call("GET", "/v1/admin/members", headers=olga)
    assert {m["member"]: m["role"] for m in body["members"]} == {"olga": "admin", "pat": "owner"}


async def test_a_member_manages_only_their_own_keys(secure):
    mia = await _key(secure, "mia", None)
    await _key(secure, "bob", None)
    status, made, _ = await secure.call("POST", "/v1/admin/keys", headers=mia, json={"name": "mia ci"})
    assert status == 201 and made["member"] == "mia" and made["kind"] == "member"
    for payload in ({"name": "x", "member": "bob"}, {"name": "x", "kind": "app"}):
        status, code, message = await _error(secure, "POST", "/v1/admin/keys", mia, json=payload)
        assert (status, code) == (403, "permission_denied") and "keys.create" in message
    status, listed, _ = await secure.call("GET", "/v1/admin/keys", headers=mia)
    assert status == 200 and {k["member"] for k in listed["keys"]} == {"mia"} and len(listed["keys"]) == 2
    bob_prefix = next(k["prefix"] for k in (await secure.call("GET", "/v1/admin/keys?workspace=alpha", "admin"))[1]
                      ["keys"] if k["member"] == "bob")
    assert (await secure.call("DELETE", f"/v1/admin/keys/{bob_prefix}", headers=mia))[0] == 404
    assert (await secure.call("DELETE", f"/v1/admin/keys/{made['prefix']}", headers=mia))[0] == 200
    for path in ("/v1/admin/members", "/v1/admin/roles", "/v1/admin/workspaces"):
        assert (await _error(secure, "GET", path, mia))[:2] == (403, "permission_denied")
    status, me, _ = await secure.call("GET", "/v1/me", headers=mia)
    assert me["role"] == "member" and me["permissions"] == ["audit.own", "keys.own", "usage.own"]


async def test_audit_rows_are_read_whole_with_audit_read_and_own_without(secure):
    mia = await _key(secure, "mia", None)
    auditor = await _key(secure, "ann", None)
    status, _, _ = await secure.call("POST", "/v1/admin/roles?workspace=alpha", "admin",
                                     json={"name": "auditor", "permissions": ["audit", "keys.own", "usage.own"]})
    assert status == 201
    assert (await secure.call("PUT", "/v1/admin/members/ann?workspace=alpha", "admin", json={"role": "auditor"}))[0] == 200
    for headers in (mia, secure.auth("a_member")):
        status, _, _ = await secure.call("PUT", "/v1/shared/files/note.txt", headers=headers, data=b"x")
        assert status in (200, 201)
    status, mine, _ = await secure.call("GET", "/v1/audit?kind=file", headers=mia)
    assert status == 200 and len(mine["entries"]) == 1
    status, whole, _ = await secure.call("GET", "/v1/audit?kind=file", headers=auditor)
    assert status == 200 and len(whole["entries"]) == 2
    other = next(e["id"] for e in whole["entries"] if e["key_id"] != mine["entries"][0]["key_id"])
    assert (await secure.call("GET", f"/v1/audit/{other}", headers=mia))[0] == 404
    assert (await secure.call("GET", f"/v1/audit/{other}", headers=auditor))[0] == 200


async def test_custom_roles_are_checked_against_the_tree(secure):
    olga = await _key(secure, "olga", "owner")
    cases = (({"name": "x", "permissions": ["keys.fly"]}, 422, "validation_error"),
             ({"name": "owner", "permissions": []}, 422, "validation_error"),
             ({"name": "Bad Name", "permissions": []}, 422, "validation_error"))
    for payload, status_wanted, code_wanted in cases:
        assert (await _error(secure, "POST", "/v1/admin/roles", olga, json=payload))[:2] == (status_wanted, code_wanted)
    status, role, _ = await secure.call("POST", "/v1/admin/roles", headers=olga,
                                        json={"name": "key-keeper", "permissions": ["keys", "audit.own"],
                                              "description": "keys"})
    assert status == 201 and role["permissions"] == ["audit.own", "keys"] and role["holders"] == []
    assert (await _error(secure, "POST", "/v1/admin/roles", olga, json={"name": "key-keeper", "permissions": []}))[:2] \
        == (409, "role_exists")
    kim = await _key(secure, "kim", "key-keeper")
    status, body, _ = await secure.call("GET", "/v1/admin/keys", headers=kim)  # `keys` grants keys.read
    assert status == 200 and len(body["keys"]) > 1
    assert (await _error(secure, "DELETE", "/v1/admin/roles/key-keeper", olga))[:2] == (409, "role_in_use")
    assert (await _error(secure, "PUT", "/v1/admin/roles/admin", olga, json={"permissions": []}))[:2] == \
        (422, "validation_error")
    assert (await _error(secure, "PUT", "/v1/admin/members/kim", olga, json={"role": "nope"}))[:2] == \
        (404, "role_not_found")
    assert (await secure.call("DELETE", "/v1/admin/members/kim", headers=olga))[0] == 200
    assert (await secure.call("DELETE", "/v1/admin/roles/key-keeper", headers=olga))[0] == 200
    status, roles, _ = await secure.call("GET", "/v1/admin/roles", headers=olga)
    assert [r["name"] for r in roles["roles"]] == ["owner", "admin", "member"]
    assert [p["name"] for p in roles["permissions"]][:2] == ["workspaces", "workspaces.read"]


async def test_each_change_is_audited_with_who_before_and_after(secure):
    olga = await _key(secure, "olga", "owner")
    await secure.call("POST", "/v1/admin/roles", headers=olga, json={"name": "reader", "permissions": ["audit.read"]})
    await secure.call("PUT", "/v1/admin/roles/reader", headers=olga, json={"permissions": ["audit"]})
    await secure.call("PUT", "/v1/admin/members/bob", headers=olga, json={"role": "reader"})
    await secure.call("DELETE", "/v1/admin/members/bob", headers=olga)
    await secure.call("DELETE", "/v1/admin/roles/reader", headers=olga)
    status, page, _ = await secure.call("GET", "/v1/audit?kind=admin", headers=olga)
    assert status == 200
    rows = [(e["mode"], e["path"], json.loads(e["code"])) for e in page["entries"]]
    olga_rows = [r for r in rows if r[2]["by"]["member"] == "olga"]
    assert [(mode, path) for mode, path, _ in olga_rows] == [
        ("role_create", "reader"), ("role_update", "reader"), ("member_role", "bob"), ("member_reset", "bob"),
        ("role_delete", "reader")]
    update = olga_rows[1][2]
    assert update["from"]["permissions"] == ["audit.read"] and update["to"]["permissions"] == ["audit"]
    assert olga_rows[2][2]["from"] == {"role": "member"} and olga_rows[2][2]["to"] == {"role": "reader"}
    operator_rows = [r for r in rows if r[2]["by"]["kind"] == "admin"]
    assert ("member_role", "olga") in [(m, p) for m, p, _ in operator_rows]
    assert ("key_create", ) == tuple(m for m, _, c in operator_rows if c["to"] and c["to"].get("member") == "olga")
