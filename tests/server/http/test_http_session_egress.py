"""A session's network policy over HTTP: created within its profile's, narrowed live with PATCH
(effective on the next call, a worker-hosted kernel included), widening refused, every change and
every egress decision in the audit log. A loopback origin stands in for the outside."""

from __future__ import annotations

import json

import pytest

from tests.helpers.loopback_origin import SMALL_BODY, Origin
from tests.helpers.server_helpers import assert_error_shape, call, new_session, run

pytestmark = pytest.mark.asyncio

FETCH = "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:{port}/small', timeout=5).read().decode())"


@pytest.fixture
def origin(tmp_path):
    server = Origin(tmp_path)
    yield server
    server.close()


def profiles(port: int) -> dict:
    return {"net": {"language": "python", "network": {"mode": "allowlist", "allow": [f"127.0.0.1:{port}"]}},
            "wide": {"language": "python", "network": {"mode": "allowlist", "allow": ["127.0.0.1"]}}}


async def test_patch_narrows_the_next_call_and_both_are_audited(serve, origin):
    client = await serve(profiles=profiles(origin.port))
    sid = await new_session(client, profile="net")
    status, info = await call(client, "GET", f"/v1/sessions/{sid}")
    assert info["egress"] == {"mode": "allowlist", "allow": [f"127.0.0.1:{origin.port}"]}

    first = await run(client, sid, FETCH.format(port=origin.port) + "\nx = 41")
    assert first["exit_code"] == 0, first
    assert SMALL_BODY.decode() in first["stdout"]
    assert first["network"][0]["allowed"] is True

    status, info = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"egress": {"mode": "deny"}})
    assert status == 200, info
    assert info["egress"] == {"mode": "deny", "allow": []}
    seen = len(origin.requests)
    second = await run(client, sid, "print(x + 1)\n" + FETCH.format(port=origin.port))
    assert second["stdout"].startswith("42")  # the same kernel: only the policy changed
    assert second["exit_code"] != 0
    assert second["network"] and second["network"][0]["allowed"] is False
    assert "deny" in second["network"][0]["reason"]
    assert len(origin.requests) == seen  # nothing reached the origin

    status, _ = await call(client, "GET", f"/v1/sessions/{sid}")
    status, rows = await call(client, "GET", "/v1/audit", params={"session": sid, "kind": "policy"})
    assert status == 200
    (row,) = rows["entries"]
    assert row["outcome"] == "ok" and row["profile"] == "net"
    change = json.loads(row["code"])
    assert change["from"]["mode"] == "allowlist" and change["to"] == {"mode": "deny", "allow": []}
    status, rows = await call(client, "GET", "/v1/audit", params={"session": sid, "kind": "exec"})
    decisions = [json.loads(r["network"]) for r in rows["entries"]]
    assert [d[0]["allowed"] for d in decisions] == [True, False]


async def test_widening_is_refused_naming_the_profile_that_allows_it(serve, origin):
    client = await serve(profiles=profiles(origin.port))
    sid = await new_session(client, profile="net")
    wider = {"egress": {"mode": "allowlist", "allow": ["127.0.0.1"]}}
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}", json=wider)
    assert status == 403, data
    assert_error_shape(data, "network_not_allowed")
    assert "wide" in data["error"]["hint"]
    status, data = await call(client, "POST", "/v1/sessions", json={"profile": "net", **wider})
    assert status == 403, data
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"egress": {"mode": "allowlist"}})
    assert status == 422, data
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}", json={})
    assert status == 422, data
    status, info = await call(client, "GET", f"/v1/sessions/{sid}")
    assert info["egress"]["allow"] == [f"127.0.0.1:{origin.port}"]  # unchanged
    status, rows = await call(client, "GET", "/v1/audit", params={"session": sid, "kind": "policy"})
    (row,) = rows["entries"]
    assert row["outcome"] == "refused" and "narrow" in row["stderr"]


async def test_the_narrowed_policy_survives_a_restart(serve, origin, tmp_path):
    client = await serve(profiles=profiles(origin.port))
    sid = await new_session(client, profile="net", egress={"mode": "deny"})
    await client.close()
    again = await serve(profiles=profiles(origin.port))
    status, info = await call(again, "GET", f"/v1/sessions/{sid}")
    assert status == 200 and info["egress"]["mode"] == "deny"
    status, info = await call(again, "PATCH", f"/v1/sessions/{sid}", json={"egress": None})
    assert info["egress"]["mode"] == "allowlist"  # null: back to the profile's
