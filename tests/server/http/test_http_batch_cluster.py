"""POST /v1/batch handed to the server's Ray cluster (three nodes started by the test)."""

import asyncio
import json

import pytest
from server_helpers import assert_error_shape

from wasm_runner.cluster.actors import ACTOR_PREFIX

ray = pytest.importorskip("ray", reason="Ray is not installed (the `ray` extra)")


def ndjson(items):
    return "".join(json.dumps(item) + "\n" for item in items).encode()


def batch_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(ACTOR_PREFIX)]


async def test_a_batch_runs_on_the_configured_cluster_with_its_harnesses(ray_cluster, serve):
    client = await serve(cluster={"ray_address": ray_cluster.address, "chunk_items": 2})
    items = [{"id": f"c{i}", "code": "def f(x): return x * 2", "harness": "check", "tests": f"assert f({i}) == {2 * i}"}
             for i in range(20)]
    items += [{"id": "io", "code": "print(int(input()) + 1)", "harness": "io",
               "cases": [{"stdin": "1", "expected": "2\n"}, {"stdin": "9", "expected": "10\n"}]},
              {"id": "slow", "code": "import time\ntime.sleep(2)\nprint('late')"}]
    async with client.post("/v1/batch", data=ndjson(items)) as response:
        assert response.status == 200
        first = json.loads(await response.content.readline())
        during = batch_actors()  # the batch's actors live while it runs
        results = [first] + [json.loads(line) async for line in response.content if line.strip()]
    by_id = {r["id"]: r for r in results}
    assert len(results) == len(by_id) == len(items)
    assert all(by_id[f"c{i}"]["verdict"] == "passed" for i in range(20))
    assert by_id["io"]["verdict"] == "passed" and by_id["slow"]["stdout"] == "late\n"
    assert len(during) == 3, during  # one per node

    again = await client.post("/v1/batch", data=ndjson(items[:3]))
    assert [json.loads(line)["verdict"] for line in (await again.text()).splitlines()] == ["passed"] * 3
    assert batch_actors() == during  # the next batch finds the nodes ready
    local = await client.post("/v1/batch?cluster=false", data=ndjson(items[:2]))
    assert [json.loads(line)["verdict"] for line in (await local.text()).splitlines()] == ["passed", "passed"]

    await client.close()  # the server's shutdown releases the cluster's CPUs
    assert batch_actors() == []


async def test_an_unreachable_or_missing_cluster_is_a_clear_error(serve):
    client = await serve()
    response = await client.post("/v1/batch?cluster=true", data=ndjson([{"code": "print(1)"}]))
    assert response.status == 422
    assert_error_shape(await response.json(), "cluster_unavailable")


async def test_a_batch_with_tools_calls_the_profiles_mcp_server_on_each_node(ray_cluster, serve):
    """Each node starts the profile's MCP server for its own items; the batch's tool set holds there, and
    every call comes back in its item's result and in the service's audit log."""
    from test_http_batch_tools import PROFILES, PROGRAM

    client = await serve(profiles=PROFILES, cluster={"ray_address": ray_cluster.address, "chunk_items": 2})
    items = [{"id": f"t{n}", "code": PROGRAM.format(n=1 + n % 3)} for n in range(12)]
    response = await client.post("/v1/batch?profile=tracker&tools=tracker_issue_title", data=ndjson(items))
    assert response.status == 200, await response.text()
    by_id = {r["id"]: r for r in map(json.loads, (await response.text()).splitlines())}
    titles = {1: "crash on start", 2: "slow search", 3: "crash on exit"}
    assert {k: r["stdout"] for k, r in by_id.items()} == {f"t{n}": f"{titles[1 + n % 3]}\nnot_allowed\n"
                                                          for n in range(12)}
    entries: list = []
    for _ in range(100):  # rows reach the audit database in batches
        entries = (await (await client.get("/v1/audit?kind=tool&limit=100")).json())["entries"]
        if len(entries) >= 24:
            break
        await asyncio.sleep(0.1)
    assert sorted(e["outcome"] for e in entries) == ["not_allowed"] * 12 + ["ok"] * 12
    await client.close()
