"""App keys never reach the workspace's shared/ directory: not over /v1/shared, not through a member's
session (whose kernels and guests see it), not through the audit rows of others' runs."""

from __future__ import annotations

import re

import pytest
from test_isolation import SESSION_ROUTES, _concrete, _method


async def _member_session_with_a_shared_secret(secure) -> str:
    status, data, _ = await secure.call("POST", "/v1/sessions", "a_member", json={})
    assert status == 201
    sid = data["id"]
    write = "open('/workspace/shared/secret.txt', 'w').write('for members'); kept = 'for members'"
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                          json={"code": write + "\nprint(kept)"})
    assert status == 200 and result["error"] is None
    return sid


@pytest.mark.parametrize(("method", "canonical"), SESSION_ROUTES, ids=[f"{m} {c}" for m, c in SESSION_ROUTES])
async def test_an_app_key_cannot_use_a_session_that_mounts_shared(secure, method, canonical):
    sid = await _member_session_with_a_shared_secret(secure)
    status, body, _ = await secure.call(_method(method), _concrete(canonical, sid), "a_app",
                                        json={"code": "print(open('/workspace/shared/secret.txt').read())"})
    assert status == 403, (status, body)
    if method != "HEAD":
        assert body["error"]["code"] == "shared_session"
        assert "app keys" in body["error"]["message"] and "POST /v1/sessions" in body["error"]["hint"]
    assert (await secure.call("GET", f"/v1/sessions/{sid}", "a_member"))[0] == 200  # the member still can


async def test_an_app_keys_own_session_has_no_shared_and_works(secure):
    await _member_session_with_a_shared_secret(secure)
    status, data, _ = await secure.call("POST", "/v1/sessions", "a_app", json={})
    sid = data["id"]
    code = "import os\nprint(os.path.exists('/workspace/shared'), os.path.exists('/workspace/shared/secret.txt'))"
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_app", json={"code": code})
    assert status == 200 and result["stdout"] == "False False\n"
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": code})
    assert status == 200 and result["stdout"] == "False False\n"  # fixed at creation, whoever calls


async def test_an_app_key_reads_only_the_audit_rows_of_its_own_calls(secure):
    await _member_session_with_a_shared_secret(secure)
    assert (await secure.call("POST", "/v1/exec", "a_app", json={"code": "print('app')"}))[0] == 200
    status, page, _ = await secure.call("GET", "/v1/audit?kind=exec", "a_app")
    assert status == 200
    app_key = secure.keys["a_app"][3:15]
    assert [row["key_id"] for row in page["entries"]] == [app_key]
    assert not any("for members" in (row["stdout"] or "") + (row["code"] or "") for row in page["entries"])
    member_key = secure.keys["a_member"][3:15]
    status, body, _ = await secure.call("GET", f"/v1/audit?key_id={member_key}", "a_app")
    assert status == 403 and body["error"]["code"] == "own_rows_only"
    _, everything, _ = await secure.call("GET", "/v1/audit?kind=exec", "a_member")
    member_row = next(row for row in everything["entries"] if row["key_id"] == member_key)
    assert "for members" in member_row["stdout"]
    assert (await secure.call("GET", f"/v1/audit/{member_row['id']}", "a_app"))[0] == 404
    assert (await secure.call("GET", f"/v1/audit/{member_row['id']}", "a_member"))[0] == 200


async def test_the_shared_api_stays_closed_to_app_keys(secure):
    await _member_session_with_a_shared_secret(secure)
    for method, path in (("GET", "/v1/shared/files"), ("GET", "/v1/shared/files/secret.txt"),
                         ("PUT", "/v1/shared/files/x.txt"), ("DELETE", "/v1/shared/files/secret.txt")):
        status, body, _ = await secure.call(method, path, "a_app")
        assert status == 404 and re.search("app", body["error"]["message"]), (method, path)
