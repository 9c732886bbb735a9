"""Every /v1/batch item is one execution: an audit row, a gate slot, the workspace's quotas, metrics."""

from __future__ import annotations

import asyncio
import itertools
import json
import re


def ndjson(items: list[dict]) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode()


def results_of(text: str) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, text.splitlines())}


def executions(metrics: str, mode: str, outcome: str) -> float:
    pattern = rf'^wasm_runner_executions_total{{language="python",mode="{mode}",outcome="{outcome}",limit=""}} (\S+)$'
    match = re.search(pattern, metrics, re.M)
    return float(match[1]) if match else 0.0


async def test_each_batch_item_has_an_audit_row_shaped_like_an_execution_row(secure):
    items = [{"id": "one", "code": "print(1)"}, {"id": "two", "code": "raise ValueError('two')"},
             {"id": "three", "code": "print(3)"}]
    status, text, _ = await secure.call("POST", "/v1/batch", "a_member", data=ndjson(items))
    assert status == 200
    assert set(results_of(text)) == {"one", "two", "three"}
    assert (await secure.call("POST", "/v1/exec", "a_member", json={"code": "print(9)"}))[0] == 200
    _, page, _ = await secure.call("GET", "/v1/audit?kind=exec", "a_member")
    rows = page["entries"]
    batch_rows = {row["code"]: row for row in rows if row["mode"] == "batch"}
    assert set(batch_rows) == {item["code"] for item in items}
    assert batch_rows["print(1)"]["stdout"] == "1\n" and batch_rows["print(1)"]["outcome"] == "ok"
    assert batch_rows["raise ValueError('two')"]["outcome"] == "error"
    assert all(row["workspace"] == "alpha" and row["key_id"] == secure.keys["a_member"][3:15]
               and row["language"] == "python" and row["provider"] == "wasm" and row["duration_ms"] > 0
               for row in batch_rows.values())
    oneshot = next(row for row in rows if row["mode"] == "oneshot")
    filled = {name for name, value in oneshot.items() if value is not None}
    for row in batch_rows.values():
        assert {name for name, value in row.items() if value is not None} == filled


async def test_metrics_count_every_batch_item(secure):
    before = (await secure.call("GET", "/metrics"))[1]
    items = [{"id": str(i), "code": f"print({i})"} for i in range(4)] + [{"id": "bad", "code": "1/0"}]
    assert (await secure.call("POST", "/v1/batch", "a_member", data=ndjson(items)))[0] == 200
    after = (await secure.call("GET", "/metrics"))[1]
    assert executions(after, "batch", "ok") - executions(before, "batch", "ok") == 4
    assert executions(after, "batch", "error") - executions(before, "batch", "error") == 1
    count = re.search(r'^wasm_runner_execution_duration_seconds_count{language="python",mode="batch"} (\d+)$',
                      after, re.M)
    assert count and int(count[1]) == 5


async def _in_flight(secure) -> int:
    metrics = (await secure.call("GET", "/metrics"))[1]
    return int(re.search(r"^wasm_runner_exec_in_flight (\d+)$", metrics, re.M)[1])


async def test_running_batch_items_take_the_workspaces_concurrent_executions(start_secure):
    secure = await start_secure(auth={"quotas": {"concurrent_executions": 2}})
    slow = [{"id": str(i), "code": "import time; time.sleep(1.5); print('done')"} for i in range(2)]
    batch = asyncio.ensure_future(secure.call("POST", "/v1/batch?concurrency=2", "a_member", data=ndjson(slow)))
    for _ in range(200):
        if await _in_flight(secure) == 2:
            break
        await asyncio.sleep(0.02)
    assert await _in_flight(secure) == 2  # both items hold a gate slot
    status, body, _ = await secure.call("POST", "/v1/exec", "a_member", json={"code": "print(1)"})
    assert status == 429 and body["error"]["code"] == "workspace_busy"
    status, text, _ = await batch
    assert status == 200 and all(r["stdout"] == "done\n" for r in results_of(text).values())


async def test_a_workspace_at_its_cap_makes_batch_items_wait_not_run_past_it(start_secure):
    secure = await start_secure(auth={"quotas": {"concurrent_executions": 1}})
    code = "import time; t = time.time(); time.sleep(0.4); print(t, time.time())"
    items = [{"id": str(i), "code": code} for i in range(3)]
    status, text, _ = await secure.call("POST", "/v1/batch?concurrency=2", "a_member", data=ndjson(items))
    assert status == 200
    spans = sorted(tuple(map(float, r["stdout"].split())) for r in results_of(text).values())
    assert len(spans) == 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.05, spans  # one at a time: the cap of 1 held for each item


async def test_a_batch_item_is_refused_once_the_workspace_is_over_its_disk_quota(start_secure):
    secure = await start_secure(auth={"quotas": {"disk_bytes": 1000}})
    sid = (await secure.call("POST", "/v1/sessions", "a_member", json={}))[1]["id"]
    items = [{"id": "first", "code": "import time; time.sleep(2.5); print(1)"}, {"id": "second", "code": "print(2)"}]
    batch = asyncio.ensure_future(secure.call("POST", "/v1/batch?concurrency=1", "a_member", data=ndjson(items)))
    await asyncio.sleep(0.5)  # the first item runs: the workspace was under its quota when it started
    # the upload fills the quota exactly (a write past it is refused before it is written)
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/big.bin", "a_member", data=b"x" * 1000))[0] == 201
    status, text, _ = await batch
    results = results_of(text)
    assert status == 200 and results["first"]["stdout"] == "1\n"
    refused = results["second"]
    assert refused["error"]["type"] == "Rejected" and "workspace_disk_quota" in refused["error"]["message"]
    assert refused["stdout"] == "" and refused["exit_code"] != 0


async def test_a_batch_whose_client_leaves_gives_back_its_slots_and_audits_the_aborted_items(start_secure):
    secure = await start_secure(auth={"quotas": {"concurrent_executions": 2}})
    slow = [{"id": str(i), "code": "import time; time.sleep(20)"} for i in range(2)]
    response = await secure.client.post("/v1/batch?concurrency=2", data=ndjson(slow), headers=secure.auth("a_member"))
    for _ in range(200):
        if await _in_flight(secure) == 2:
            break
        await asyncio.sleep(0.02)
    assert await _in_flight(secure) == 2
    response.close()  # the client goes away mid-batch
    for _ in range(400):
        if await _in_flight(secure) == 0:
            break
        await asyncio.sleep(0.025)
    assert await _in_flight(secure) == 0
    status, result, _ = await secure.call("POST", "/v1/exec", "a_member", json={"code": "print('free')"})
    assert status == 200 and result["stdout"] == "free\n"  # the workspace's executions were given back
    _, page, _ = await secure.call("GET", "/v1/audit?kind=exec", "a_member")
    assert [row["outcome"] for row in page["entries"] if row["mode"] == "batch"] == ["aborted", "aborted"]
