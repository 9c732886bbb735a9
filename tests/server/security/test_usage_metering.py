"""Usage metering over HTTP against a known workload: executions, a background process's seconds,
egress bytes to a loopback origin, stored bytes; who may read whose usage; CSV; /metrics; budgets
refusing executions with 402 budget_exhausted."""

from __future__ import annotations

import json
import math

import pytest
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, new_session, start
from server_helpers import assert_error_shape, eventually

from tests.helpers.loopback_origin import Origin

pytestmark = NATIVE_ROOT_SERVICE[:1]

POST = ("import urllib.request\n"
        "body = b'y' * {size}\n"
        "req = urllib.request.Request('http://127.0.0.1:{port}/echo', data=body, method='POST')\n"
        "print(len(urllib.request.urlopen(req, timeout=5).read()))")
STORED = 100_000


@pytest.fixture
def origin(tmp_path):
    server = Origin(tmp_path)
    yield server
    server.close()


def _config(port: int, **auth) -> dict:
    net = {"language": "python", "network": {"mode": "allowlist", "allow": [f"127.0.0.1:{port}"]}}
    return {"profiles": {"net": net}, "auth": {"usage": {"sample_interval_s": 0.2, "flush_interval_s": 0.1}, **auth},
            **SECTIONS}


async def _usage(secure, caller: str, **params) -> tuple[int, dict]:
    status, data, _ = await secure.call("GET", "/v1/usage", caller, params=params)
    return status, data


def _by_unit(report: dict) -> dict[str, float]:
    return {e["unit"]: e["amount"] for e in report["entries"]}


async def test_a_known_workload_is_metered_for_the_key_that_pays(start_secure, origin):
    secure = await start_secure(**_config(origin.port))
    key_id = secure.keys["a_member"][3:15]
    sid = await new_session(secure, profile="net")
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/data.bin", "a_member", data=b"z" * STORED))[0] == 201
    results = []
    for code in ("print(1)", "sum(range(200000))", POST.format(size=20_000, port=origin.port)):
        status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": code})
        assert status == 200 and result["exit_code"] == 0, result
        results.append(result)
    assert results[2]["stdout"] == "20000\n"
    status, native, _ = await secure.call("POST", f"/v1/sessions/{sid}/process", "a_member",
                                          json={"command": ["sh", "-c", "wc -c < data.bin"]})
    assert status == 200 and native["stdout"].strip() == str(STORED), native
    results.append(native)
    sleeper = (POST.format(size=30_000, port=origin.port) + "\nimport time\ntime.sleep(1)").replace("\n", ";")
    process = await start(secure, sid, command=["python3", "-c", sleeper])

    async def ended() -> bool:
        _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{process['id']}", "a_member")
        return info["state"] == "exited"

    await eventually(ended, timeout=15)
    _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{process['id']}", "a_member")

    async def stored_sampled() -> bool:
        return _by_unit((await _usage(secure, "a_member", group_by="unit"))[1]).get("byte_hours", 0) > 0

    await eventually(stored_sampled, timeout=10)
    status, report = await _usage(secure, "a_member", group_by="key")
    assert status == 200
    rows = {e["unit"]: e for e in report["entries"]}
    assert {e["payer_id"] for e in report["entries"]} == {key_id}  # the key pays, nobody else
    assert all(e["payer_kind"] == "key" and e["key_kind"] == "member" for e in report["entries"])
    assert rows["executions"]["amount"] == 4
    assert math.isclose(rows["wall_seconds"]["amount"], sum(r["duration_ms"] for r in results) / 1000, rel_tol=1e-6)
    assert math.isclose(rows["cpu_seconds"]["amount"], sum(r["cpu_ms"] for r in results) / 1000, rel_tol=1e-6)
    assert rows["cpu_seconds"]["amount"] > 0
    sent = sum(e["bytes_sent"] + e["bytes_received"] for e in results[2]["network"])
    assert sent >= 40_000  # the body out and its echo back
    _, audit, _ = await secure.call("GET", "/v1/audit", "a_member", params={"kind": "process"})
    relayed = sum(e["bytes_sent"] + e["bytes_received"] for row in audit["entries"] if row["network"]
                  for e in json.loads(row["network"]))
    assert relayed >= 60_000  # the process's request through the egress proxy, both ways
    assert rows["egress_bytes"]["amount"] == sent + relayed
    # the background process's wall time, and the native run's
    expected = info["ended_at"] - info["started_at"] + native["duration_ms"] / 1000
    assert math.isclose(rows["process_seconds"]["amount"], expected, rel_tol=1e-6)
    assert rows["process_seconds"]["amount"] >= 1.0  # it slept a second
    assert rows["byte_hours"]["amount"] > 0

    status, by_day = await _usage(secure, "a_member", group_by="day", unit="executions")
    (day,) = by_day["entries"]
    assert day["amount"] == 4 and len(day["day"]) == 10
    status, none = await _usage(secure, "a_member", **{"from": "2000-01-01", "to": "2000-01-31"})
    assert status == 200 and none["entries"] == []

    # another workspace sees none of it; naming it is a 404; an admin reads any workspace
    status, theirs = await _usage(secure, "b_member", group_by="unit")
    assert status == 200 and theirs["entries"] == []
    status, data = await _usage(secure, "b_member", workspace="alpha")
    assert status == 404, data
    status, admin = await _usage(secure, "admin", workspace="alpha", group_by="unit")
    assert _by_unit(admin)["executions"] == 4
    status, app = await _usage(secure, "a_app", group_by="unit")  # an app key: its own calls only
    assert status == 200 and app["entries"] == []
    status, data = await _usage(secure, "a_app", key=key_id)
    assert status == 403, data

    status, text, headers = await secure.call("GET", "/v1/usage", "a_member", params={"format": "csv",
                                                                                      "group_by": "key"})
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    lines = text.splitlines()
    assert lines[0] == "workspace,payer_kind,payer_id,key_kind,unit,amount"
    assert f"alpha,key,{key_id},member,executions,4.0" in lines

    status, metrics, _ = await secure.call("GET", "/metrics")
    assert 'wasm_runner_usage_total{unit="executions"} 4' in metrics
    assert "alpha" not in metrics  # aggregate only: no tenant in its labels


async def test_a_spent_budget_refuses_executions_with_402_until_it_is_raised(start_secure):
    secure = await start_secure(auth={"budgets": {"executions": 2}}, **SECTIONS)
    sid = await new_session(secure)
    for _ in range(2):
        assert (await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": "1"}))[0] == 200
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": "1"})
    assert status == 402, data
    assert_error_shape(data, "budget_exhausted")
    assert "used 2 executions" in data["error"]["message"] and "budget for the month is 2" in data["error"]["message"]
    assert "/v1/usage" in data["error"]["hint"]
    for path, body in (("/v1/exec", {"code": "1"}), (f"/v1/sessions/{sid}/processes", {"command": ["true"]})):
        status, data, _ = await secure.call("POST", path, "a_member", json=body)
        assert status == 402, (path, data)
    assert (await secure.call("POST", "/v1/exec", "b_member", json={"code": "1"}))[0] == 200  # beta's own budget

    # a batch is admitted item by item: those past the budget get its refusal as their result
    lines = "".join(json.dumps({"code": f"print({n})"}) + "\n" for n in range(4))
    status, text, _ = await secure.call("POST", "/v1/batch?concurrency=1", "c_member", data=lines,
                                        headers={"Content-Type": "application/x-ndjson"})
    assert status == 200, text
    results = [json.loads(line) for line in text.splitlines()]
    assert [r["stdout"] for r in results[:2]] == ["0\n", "1\n"]
    assert [r["error"]["message"].split(":")[0] for r in results[2:]] == ["budget_exhausted"] * 2

    status, data, _ = await secure.call("PUT", "/v1/admin/workspaces/alpha/budgets", "a_member",
                                        json={"budgets": {"executions": 10}})
    assert status == 403, data
    status, state, _ = await secure.call("PUT", "/v1/admin/workspaces/alpha/budgets", "admin",
                                         json={"budgets": {"executions": 10, "egress_bytes": 1e9}})
    assert status == 200, state
    assert {b["unit"]: (b["budget"], b["used"], b["source"]) for b in state["budgets"]} == {
        "executions": (10, 2, "workspace"), "egress_bytes": (1e9, 0, "workspace")}
    assert (await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": "1"}))[0] == 200
    status, data, _ = await secure.call("PUT", "/v1/admin/workspaces/alpha/budgets", "admin",
                                        json={"budgets": {"wall_hours": 1}})
    assert status == 422, data
    status, page, _ = await secure.call("GET", "/v1/audit?kind=admin&workspace=alpha", "admin")  # audited
    assert status == 200, page
    [row] = [json.loads(e["code"]) for e in page["entries"] if e["mode"] == "budgets_set" and e["path"] == "alpha"]
    assert row["from"] == {} and row["to"] == {"executions": 10, "egress_bytes": 1e9}
