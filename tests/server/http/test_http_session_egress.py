"""A session's network policy over HTTP: created within its profile's, narrowed live with PATCH
(effective on the next call, a worker-hosted kernel included), widening refused, every change and
every egress decision in the audit log. A loopback origin stands in for the outside."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.helpers.loopback_origin import SMALL_BODY, Origin
from tests.helpers.server_helpers import assert_error_shape, call, eventually, new_session, run
from wasm_runner.providers.native.bwrap import find_bwrap, probe

pytestmark = pytest.mark.asyncio

_bwrap = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed" if _bwrap is None else probe(_bwrap)
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

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
    assert row["outcome"] == "refused" and "stay within" in row["stderr"]


async def test_a_session_switches_its_network_on_within_the_profiles_session_max_without_the_operator(serve, origin):
    off = {"language": "python", "network": {"mode": "deny",
                                             "session_max": {"mode": "open", "allow": [f"127.0.0.1:{origin.port}"]}}}
    client = await serve(profiles={"off": off})
    sid = await new_session(client, profile="off")
    fetch = FETCH.format(port=origin.port)
    first = await run(client, sid, fetch)
    assert first["exit_code"] != 0 and first["network"][0]["allowed"] is False  # off until asked
    status, info = await call(client, "PATCH", f"/v1/sessions/{sid}",
                              json={"egress": {"mode": "allowlist", "allow": [f"127.0.0.1:{origin.port}"]}})
    assert status == 200, info
    on = await run(client, sid, fetch)
    assert on["exit_code"] == 0 and SMALL_BODY.decode() in on["stdout"], on
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}",
                              json={"egress": {"mode": "allowlist", "allow": ["127.0.0.1"]}})
    assert status == 403, data  # past session_max: every loopback port
    assert_error_shape(data, "network_not_allowed")


async def test_a_builtin_profiles_session_may_turn_to_open_which_still_refuses_private_addresses(client, origin):
    sid = await new_session(client)  # the built-in python profile: deny until asked
    status, info = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"egress": "open"})  # as the config writes it
    assert status == 200 and info["egress"] == {"mode": "open", "allow": []}, info
    result = await run(client, sid, FETCH.format(port=origin.port))
    assert result["network"][0]["allowed"] is False  # open means public destinations only
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}",
                              json={"egress": {"mode": "allowlist", "allow": [f"127.0.0.1:{origin.port}"]}})
    assert status == 403, data  # a private address needs the operator's entry
    status, data = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"egress": "allowlist"})
    assert status == 422, data  # an allowlist needs its entries
    status, info = await call(client, "POST", "/v1/sessions", json={"egress": "deny"})
    assert status == 201 and info["egress"]["mode"] == "deny", info


async def test_the_narrowed_policy_survives_a_restart(serve, origin, tmp_path):
    client = await serve(profiles=profiles(origin.port))
    sid = await new_session(client, profile="net", egress={"mode": "deny"})
    await client.close()
    again = await serve(profiles=profiles(origin.port))
    status, info = await call(again, "GET", f"/v1/sessions/{sid}")
    assert status == 200 and info["egress"]["mode"] == "deny"
    status, info = await call(again, "PATCH", f"/v1/sessions/{sid}", json={"egress": None})
    assert info["egress"]["mode"] == "allowlist"  # null: back to the profile's


async def test_a_call_may_narrow_its_sessions_policy_for_itself_and_never_widen_it(serve, origin):
    client = await serve(profiles=profiles(origin.port))
    sid = await new_session(client, profile="net")
    fetch = FETCH.format(port=origin.port)
    narrowed = await run(client, sid, fetch, egress={"mode": "deny"})
    assert narrowed["exit_code"] != 0 and narrowed["network"][0]["allowed"] is False
    assert "deny" in narrowed["network"][0]["reason"]
    again = await run(client, sid, fetch)  # the next call is under the session's policy again
    assert again["exit_code"] == 0 and again["network"][0]["allowed"] is True

    status, data = await call(client, "POST", f"/v1/sessions/{sid}/exec",
                              json={"code": fetch, "egress": {"mode": "allowlist", "allow": ["127.0.0.1"]}})
    assert status == 403, data
    assert_error_shape(data, "network_not_allowed")
    assert "session's" in data["error"]["message"] and "PATCH" in data["error"]["hint"]
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/exec",
                              json={"code": fetch, "egress": {"mode": "deny", "allow": ["x.test"]}})
    assert status == 422, data
    assert_error_shape(data, "validation_error")


async def test_a_one_shot_run_may_narrow_its_profiles_policy_and_a_wider_one_is_403_as_for_sessions(serve, origin):
    client = await serve(profiles=profiles(origin.port))
    fetch = FETCH.format(port=origin.port)
    status, allowed = await call(client, "POST", "/v1/exec", json={"code": fetch, "profile": "net"})
    assert status == 200 and allowed["exit_code"] == 0, allowed
    for files in ({}, {"seed.txt": "x"}):  # the core's one-shot path and the seeded workspace's
        status, narrowed = await call(client, "POST", "/v1/exec",
                                      json={"code": fetch, "profile": "net", "egress": {"mode": "deny"}, "files": files})
        assert status == 200 and narrowed["network"][0]["allowed"] is False, narrowed
        status, data = await call(client, "POST", "/v1/exec", json={
            "code": fetch, "profile": "net", "files": files, "egress": {"mode": "allowlist", "allow": ["127.0.0.1"]}})
        assert status == 403, data
        assert_error_shape(data, "network_not_allowed")
    status, data = await call(client, "POST", "/v1/exec",
                              json={"code": fetch, "profile": "net", "egress": {"mode": "allowlist"}})
    assert status == 422, data


async def test_a_brokered_secret_reaches_the_origin_and_no_column_of_the_audit_row(serve, origin, monkeypatch):
    secret = "http-audit-s3cr3t-51c2"
    monkeypatch.setenv("HTTP_AUDIT_TOKEN", secret)  # the service's own environment, before its workers start
    net = profiles(origin.port)["net"]
    net["network"]["credentials"] = [{"destinations": [f"http://127.0.0.1:{origin.port}"], "env": "HTTP_AUDIT_TOKEN"}]
    client = await serve(profiles={"net": net})
    sid = await new_session(client, profile="net")
    code = ("import urllib.request\n"
            f"r = urllib.request.urlopen('http://127.0.0.1:{origin.port}/echo-auth', timeout=5)\n"
            "print(r.read().decode(), r.headers['X-Echo'])")
    result = await run(client, sid, code)
    assert result["exit_code"] == 0, result
    assert origin.requests[-1][2]["Authorization"] == f"Bearer {secret}"
    assert secret not in json.dumps(result) and result["network"][0]["credential"] is True
    status, rows = await call(client, "GET", "/v1/audit", params={"session": sid, "kind": "exec"})
    (row,) = rows["entries"]
    assert row["network"] and json.loads(row["network"])[0]["credential"] is True
    assert not [name for name, value in row.items() if secret in str(value)]


@needs_sandbox
async def test_a_running_background_process_follows_a_patch_and_its_decisions_are_audited(serve, origin):
    name = "api.allowed.test"
    client = await serve(egress={"resolver_overrides": {name: ["127.0.0.1"]}},
                         profiles={"net": {"language": "bash", "provider": "native", "network": {
                             "mode": "allowlist", "allow": [f"{name}:{origin.port}", f"127.0.0.1:{origin.port}"]}}},
                         processes={"stop_grace_s": 0.5})
    sid = await new_session(client, profile="net")
    loop = (f"while true; do curl -s -o /dev/null -w '%{{http_code}}\\n' http://{name}:{origin.port}/small; "
            "sleep 0.1; done")
    status, info = await call(client, "POST", f"/v1/sessions/{sid}/processes", json={"code": loop})
    assert status == 201, info
    output = f"/v1/sessions/{sid}/processes/{info['id']}/output"

    async def printed(code: str) -> bool:
        _, chunk = await call(client, "GET", output, params={"stream": "stdout"})
        return code in chunk["data"].split()

    await eventually(lambda: printed("200"), timeout=20)
    status, _ = await call(client, "PATCH", f"/v1/sessions/{sid}", json={"egress": {"mode": "deny"}})
    assert status == 200
    await eventually(lambda: printed("403"), timeout=20)
    reached = len(origin.requests)
    await asyncio.sleep(0.5)  # several more turns of the loop, each refused
    assert len(origin.requests) == reached
    status, _ = await call(client, "DELETE", f"/v1/sessions/{sid}/processes/{info['id']}")
    assert status == 200

    async def ended() -> bool:
        _, rows = await call(client, "GET", "/v1/audit", params={"session": sid, "kind": "process"})
        return any(row["mode"] == "exit" for row in rows["entries"])

    await eventually(ended, timeout=10)
    _, rows = await call(client, "GET", "/v1/audit", params={"session": sid, "kind": "process"})
    decisions = [event for row in rows["entries"] if row["network"] for event in json.loads(row["network"])]
    allowed = [e for e in decisions if e["allowed"]]
    refused = [e for e in decisions if not e["allowed"]]
    assert allowed and all(e["host"] == name and e["status"] == 200 for e in allowed)
    assert refused and all("deny" in e["reason"] for e in refused)
    assert len(allowed) == reached  # every request that reached the origin has its row
