"""Forks and templates over HTTP, with keys: copies that share nothing writable, diverge on
their own, stay in their workspace, and count against its quotas; every one audited."""

from __future__ import annotations

import os

import pytest

MiB = 1 << 20


async def session(secure, key="a_member", **fields) -> str:
    status, data, _ = await secure.call("POST", "/v1/sessions", key, json=fields)
    assert status == 201, data
    return data["id"]


async def run(secure, sid, code, key="a_member", **fields) -> dict:
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", key, json={"code": code, **fields})
    assert status == 200, data
    return data


async def test_a_forks_children_see_the_parents_state_and_share_nothing_writable(secure):
    parent = await session(secure)
    await run(secure, parent, "import random, uuid\nx = 41\nopen('f.txt', 'w').write('parent')")
    status, fork, _ = await secure.call("POST", f"/v1/sessions/{parent}:fork", "a_member", json={"count": 16})
    assert status == 201, fork
    children = [s["id"] for s in fork["sessions"]]
    assert len(set(children)) == 16 and not fork["failed"] and fork["kernels"] == ["python"]
    first = await run(secure, children[0], "(x, open('f.txt').read())")
    assert first["value"] == "(41, 'parent')" and first["kernel_restored"]
    # write in one child: neither the parent nor a sibling sees it
    await run(secure, children[0], "x = 1\nopen('f.txt', 'w').write('child')")
    for other in (parent, children[1]):
        assert (await run(secure, other, "(x, open('f.txt').read())"))["value"] == "(41, 'parent')"
    draws = {(await run(secure, c, "(random.random(), uuid.uuid4().hex)"))["value"] for c in children}
    assert len(draws) == 16  # each child's randomness is its own


async def test_another_workspace_can_neither_fork_nor_see_the_children(secure):
    parent = await session(secure)
    await run(secure, parent, "x = 1")
    status, _, _ = await secure.call("POST", f"/v1/sessions/{parent}:fork", "b_member", json={"count": 1})
    assert status == 404
    status, fork, _ = await secure.call("POST", f"/v1/sessions/{parent}:fork", "a_member")
    child = fork["sessions"][0]["id"]
    status, _, _ = await secure.call("POST", f"/v1/sessions/{child}/exec", "b_member", json={"code": "x"})
    assert status == 404


async def test_forks_count_against_the_session_and_disk_quotas(start_secure):
    secure = await start_secure(auth={"quotas": {"sessions": 4, "disk_bytes": 8 * MiB}})
    parent = await session(secure)
    status, data, _ = await secure.call("POST", f"/v1/sessions/{parent}:fork", "a_member", json={"count": 4})
    assert status == 429 and data["error"]["code"] == "workspace_session_quota"
    await run(secure, parent, f"open('big.bin', 'wb').write(bytes({3 * MiB}))")
    status, data, _ = await secure.call("POST", f"/v1/sessions/{parent}:fork", "a_member", json={"count": 3})
    assert status == 429 and data["error"]["code"] == "workspace_disk_quota", data
    status, data, _ = await secure.call("POST", f"/v1/sessions/{parent}:fork", "a_member", json={"count": 1})
    assert status == 201, data


async def test_a_fork_request_out_of_bounds_is_a_clear_422(secure):
    parent = await session(secure)
    for count in (0, 65, "two"):
        status, data, _ = await secure.call("POST", f"/v1/sessions/{parent}:fork", "a_member", json={"count": count})
        assert status == 422 and "count" in data["error"]["message"], data


async def test_a_template_starts_sessions_with_its_state_and_stays_in_its_workspace(secure):
    source = await session(secure)
    await run(secure, source, "import json\nready = {'rows': list(range(5))}\nopen('data.csv', 'w').write('a,b')")
    status, info, _ = await secure.call("POST", "/v1/templates", "a_member",
                                        json={"name": "rows-ready", "session": source})
    assert status == 201 and info["kernels"] == ["python"] and info["bytes"] > 0, info
    started = await session(secure, template="rows-ready")
    first = await run(secure, started, "(len(ready['rows']), open('data.csv').read(), json.dumps(1))")
    assert first["value"] == "(5, 'a,b', '1')" and first["kernel_restored"]
    status, listed, _ = await secure.call("GET", "/v1/templates", "a_member")
    assert [t["name"] for t in listed["templates"]] == ["rows-ready"]
    # another workspace does not see it, cannot start from it
    status, listed, _ = await secure.call("GET", "/v1/templates", "b_member")
    assert listed["templates"] == []
    status, data, _ = await secure.call("POST", "/v1/sessions", "b_member", json={"template": "rows-ready"})
    assert status == 404 and data["error"]["code"] == "template_not_found"
    status, _, _ = await secure.call("DELETE", "/v1/templates/rows-ready", "b_member")
    assert status == 404
    status, _, _ = await secure.call("DELETE", "/v1/templates/rows-ready", "a_member")
    assert status == 204
    status, data, _ = await secure.call("POST", "/v1/sessions", "a_member", json={"template": "rows-ready"})
    assert status == 404
    status, audit, _ = await secure.call("GET", "/v1/audit?kind=session", "a_member")
    assert status == 200, audit
    modes = {row["mode"] for row in audit["entries"]}
    assert {"template_publish", "template_start", "template_delete"} <= modes, audit


@pytest.mark.parametrize("name", ["../up", "UPPER", "a/b", "", "x" * 65])
async def test_a_malformed_template_name_is_a_422(secure, name):
    source = await session(secure)
    status, data, _ = await secure.call("POST", "/v1/templates", "a_member", json={"name": name, "session": source})
    assert status == 422, data
    assert not os.path.exists(secure.data_dir / "workspaces" / "up")


async def test_a_template_counts_against_the_workspace_disk_quota(start_secure):
    secure = await start_secure(auth={"quotas": {"disk_bytes": 8 * MiB}})
    source = await session(secure)
    await run(secure, source, f"open('big.bin', 'wb').write(bytes({5 * MiB}))")
    status, data, _ = await secure.call("POST", "/v1/templates", "a_member", json={"name": "big", "session": source})
    assert status == 429 and data["error"]["code"] == "workspace_disk_quota", data
    status, listed, _ = await secure.call("GET", "/v1/templates", "a_member")
    assert listed["templates"] == []
