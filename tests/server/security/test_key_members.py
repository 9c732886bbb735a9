"""A member or admin key names the person it acts for; the caller's member is what `/v1/me` shows."""

from __future__ import annotations

import sqlite3

import pytest

from wasm_runner_server.security.tenants import DB_NAME, TenantStore


async def test_a_key_made_for_a_member_acts_for_that_member(secure):
    made = []
    for name in ("alice laptop", "alice ci"):
        status, new, _ = await secure.call("POST", "/v1/admin/keys", "admin",
                                           json={"workspace": "alpha", "name": name, "member": "alice"})
        assert status == 201 and new["member"] == "alice"
        made.append(new)
    for new in made:  # two keys, one person
        status, me, _ = await secure.call("GET", "/v1/me", headers={"Authorization": f"Bearer {new['key']}"})
        assert status == 200
        assert me == {"workspace": "alpha", "key_prefix": new["prefix"], "kind": "member", "member": "alice",
                      "scopes": None,
                      "role": "member", "operator": False, "permissions": ["audit.own", "keys.own", "usage.own"]}
    status, me, _ = await secure.call("GET", "/v1/me", "a_app")
    assert status == 200 and me["kind"] == "app" and me["member"] is None
    status, listed, _ = await secure.call("GET", "/v1/admin/keys?workspace=alpha", "admin")
    assert {k["name"]: k["member"] for k in listed["keys"]}["alice ci"] == "alice"


async def test_a_member_id_is_checked(secure):
    for body, words in (({"member": "../bob"}, "$.member"), ({"member": "x" * 65}, "$.member"),
                        ({"member": "bob", "kind": "app"}, "app key")):
        status, error, _ = await secure.call("POST", "/v1/admin/keys", "admin",
                                             json={"workspace": "alpha", "name": "k", **body})
        assert status == 422 and words in error["error"]["message"], error
    assert (await secure.call("GET", "/v1/me"))[0] == 401


def test_a_database_made_before_members_gains_the_column(tmp_path):
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.executescript("""
        CREATE TABLE workspaces (name TEXT PRIMARY KEY, created_at REAL NOT NULL);
        CREATE TABLE keys (id TEXT PRIMARY KEY, workspace TEXT NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL,
                           hash TEXT NOT NULL, created_at REAL NOT NULL, last_used_at REAL, revoked_at REAL);
        INSERT INTO workspaces VALUES ('alpha', 1.0);
        INSERT INTO keys VALUES ('0123456789ab', 'alpha', 'old', 'member', 'h', 1.0, NULL, NULL);
    """)
    db.commit()
    db.close()
    store = TenantStore.in_data_dir(tmp_path)
    try:
        assert [(k.name, k.member) for k in store.keys()] == [("old", None)]
        key, record = store.create_key("alpha", "new", "member", "carol")
        verified = store.verify(key)
        assert verified is not None and verified.member == "carol" == record.member
        with pytest.raises(ValueError, match="app key"):
            store.create_key("alpha", "svc", "app", "carol")
    finally:
        store.close()
