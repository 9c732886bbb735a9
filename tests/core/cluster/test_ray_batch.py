"""Batches on a Ray cluster of three nodes started by the test: one correct verdict per item,
nothing lost or duplicated when a node goes, cancellation, flat driver memory."""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from batch_items import expected_verdict, mixed_items
from host_processes import host_processes_with

from wasm_runner import ExecRequest, Limits, Runner
from wasm_runner.cluster import ClusterUnavailableError, RayCluster

SETTINGS = {"keep_actors_s": 0.0, "start_timeout_s": 60.0}
"""Each batch's actors give their CPUs back as it ends (the command-line test's driver needs them)."""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """The driver's Runner: its own lanes stay idle, the cluster runs the items."""
    with Runner(tmp_path_factory.mktemp("driver")) as runner:
        yield runner


async def test_five_thousand_mixed_items_get_exactly_one_correct_verdict_each(ray_cluster, driver):
    weights = {"pass": 2680, "fail": 1500, "error": 300, "timeout": 40, "crash": 50, "memory": 50, "flood": 60,
               "overflow": 20, "io-pass": 150, "io-fail": 150}
    verdicts = {}
    async for result in driver.run_many(mixed_items(weights), cluster=RayCluster(**SETTINGS)):
        assert result.id not in verdicts, f"{result.id} answered twice"
        verdicts[result.id] = result.verdict
        assert not result.retried
    assert len(verdicts) == 5000
    assert {item: v for item, v in verdicts.items() if v != expected_verdict(item)} == {}


async def test_a_node_lost_mid_batch_loses_and_duplicates_nothing(ray_cluster, driver):
    doomed = ray_cluster.add_node(num_cpus=1)
    requests = (ExecRequest(code=f"import time\ntime.sleep(0.03)\nprint({i} * 3)", id=str(i)) for i in range(600))
    outputs: dict[str, str] = {}
    retried = []
    async for result in driver.run_many(requests, cluster=RayCluster(chunk_items=4, **SETTINGS)):
        assert result.id not in outputs, f"{result.id} answered twice"
        outputs[result.id] = result.stdout
        if result.retried:
            retried.append(result.id)
        if len(outputs) == 100:
            ray_cluster.remove_node(doomed, allow_graceful=False)
    assert outputs == {str(i): f"{i * 3}\n" for i in range(600)}
    assert retried, "the lost node had items in flight: they ran again elsewhere and say so"


def _guest_cpu_ticks(marker: str) -> int:
    """CPU time of the host processes whose command line holds `marker`, in clock ticks."""
    ticks = 0
    for pid in host_processes_with(marker):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks


async def test_cancelling_the_batch_stops_the_cluster_guests_within_seconds(ray_cluster, driver, tmp_path):
    requests = [ExecRequest(code="print('quick')", id="quick")]
    requests += [ExecRequest(code="while True: pass", limits=Limits(timeout_s=120), id=str(i)) for i in range(30)]
    batch = driver.run_many(requests, cluster=RayCluster(chunk_items=1, data_dir=str(tmp_path), **SETTINGS))
    assert (await anext(batch)).id == "quick"
    consumer = asyncio.create_task(anext(batch))
    await asyncio.sleep(2)  # the spinning guests run on the three nodes, in their actors' worker processes
    marker = str(tmp_path)  # in the command line of those (their data directories are under it)
    busy = _guest_cpu_ticks(marker)
    await asyncio.sleep(1)
    # a tenth of a core at least (they share it with whatever else this machine runs); idle is about 0
    assert _guest_cpu_ticks(marker) - busy > os.sysconf("SC_CLK_TCK") // 10, "the cluster's guests were not running"

    cancelled = time.monotonic()
    consumer.cancel()
    await asyncio.gather(consumer, return_exceptions=True)
    await batch.aclose()
    while True:
        before = _guest_cpu_ticks(marker)
        await asyncio.sleep(0.5)
        if _guest_cpu_ticks(marker) - before <= 2:  # idle or gone
            break
        assert time.monotonic() - cancelled < 5, "the cluster's guests still run 5 s after the cancel"
    assert time.monotonic() - cancelled < 5


async def test_driver_memory_stays_flat_over_twenty_thousand_items(ray_cluster, driver):
    # The Python heap as tracemalloc counts it, not the RSS: Ray's own buffers move the RSS by
    # megabytes, which would take a hundred thousand items to outweigh a leak of 100 bytes an item.
    requests = (ExecRequest(code="pass", id=str(i)) for i in range(20_000))
    done, samples = 0, {}
    tracemalloc.start()
    try:
        async for result in driver.run_many(requests, cluster=RayCluster(chunk_items=64, **SETTINGS)):
            assert result.exit_code == 0, result
            done += 1
            if done in (4_000, 20_000):
                samples[done] = tracemalloc.get_traced_memory()[0] / 2**20
    finally:
        tracemalloc.stop()
    assert done == 20_000
    # Held per item, a 100-byte result would add about 1.5 MiB over the last 16 000.
    assert samples[20_000] - samples[4_000] < 0.75, samples


async def test_an_unreachable_cluster_is_a_clear_error(tmp_path):
    code = (
        "import asyncio\n"
        "from wasm_runner import Runner\n"
        "from wasm_runner.cluster import RayCluster, ClusterUnavailableError\n"
        "async def main():\n"
        "    with Runner() as runner:\n"
        "        try:\n"
        "            async for _ in runner.run_many([], cluster=RayCluster(address='127.0.0.1:9')):\n"
        "                pass\n"
        "        except ClusterUnavailableError as exc:\n"
        "            print('refused:', exc)\n"
        "asyncio.run(main())\n"
    )
    process = await asyncio.create_subprocess_exec(
        "python3", "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=os.environ)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert "refused: cannot reach the Ray cluster at '127.0.0.1:9'" in out.decode(), out.decode()[-2000:]


def test_settings_are_checked():
    with pytest.raises(ValueError, match="chunk_items"):
        RayCluster(chunk_items=0)
    with pytest.raises(ValueError, match="lanes_per_node"):
        RayCluster(lanes_per_node=0)
    assert issubclass(ClusterUnavailableError, RuntimeError)


def test_the_cli_runs_a_batch_on_the_cluster_with_its_summary(ray_cluster, tmp_path):
    items = tmp_path / "items.jsonl"
    lines = [{"id": f"{task}-{n}", "task_id": task, "code": f"def f(x): return x + {1 if n < good else 2}",
              "harness": "check", "tests": "assert f(1) == 2"}
             for task, good in (("t1", 3), ("t2", 1)) for n in range(3)]
    items.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out, summary = tmp_path / "results.jsonl", tmp_path / "summary.json"
    for address in (ray_cluster.address, "auto"):  # the head's address; the cluster running on this machine
        done = subprocess.run([sys.executable, "-m", "wasm_runner.cli", "batch", str(items), "-o", str(out),
                               "--ray", address, "--no-progress", "--group-field", "task_id", "--pass-at", "1,2",
                               "--summary", str(summary)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        verdicts = {r["id"]: r["verdict"] for r in map(json.loads, out.read_text().splitlines())}
        assert verdicts == {f"{t}-{n}": "passed" if n < good else "failed" for t, good in (("t1", 3), ("t2", 1))
                            for n in range(3)}
        report = json.loads(summary.read_text())
        assert report["pass_at_k"]["pass@1"] == pytest.approx((1 + 1 / 3) / 2)
        assert report["pass_at_k"]["pass@2"] == pytest.approx((1 + 2 / 3) / 2)  # t2: 1 - C(2,2)/C(3,2)
        assert report["retried"] == 0


MCP_SERVER = Path(__file__).resolve().parents[2] / "helpers" / "mcp_issue_server.py"
TOKEN = "node-token-7f3a"
TOOL_PROGRAM = """
from sandbox import tools, ToolError
print(tools.issue_title(number={n}))
try:
    tools.search_issues(query="crash")
except ToolError as e:
    print(e.kind)
"""


async def test_items_on_the_nodes_call_the_mcp_servers_each_node_starts(ray_cluster, driver):
    """Code mode on Ray: each node starts the batch's MCP server for its items (its credential stays with
    that process); the allowlist holds there, each call is in its item's result and audited by the driver."""
    from wasm_runner.profiles import McpServerConfig
    from wasm_runner.tools import ToolPolicy

    server = McpServerConfig(command=[sys.executable, str(MCP_SERVER)], env={"TRACKER_TOKEN": TOKEN})
    audited = []
    requests = (ExecRequest(code=TOOL_PROGRAM.format(n=1 + i % 3), id=str(i)) for i in range(30))
    results = {}
    async for result in driver.run_many(requests, cluster=RayCluster(chunk_items=2, **SETTINGS), mcp_servers=[server],
                                        allow_tools=["issue_title"], tool_policy=ToolPolicy(audit=audited.append)):
        results[result.id] = result
    titles = {1: "crash on start", 2: "slow search", 3: "crash on exit"}
    assert {i: r.stdout for i, r in results.items()} == {str(i): f"{titles[1 + i % 3]}\nnot_allowed\n"
                                                         for i in range(30)}
    assert all([c.outcome for c in r.tool_calls] == ["ok", "not_allowed"] for r in results.values())
    assert len(audited) == 60 and {c.tool for c in audited} == {"issue_title", "search_issues"}
    assert not any(TOKEN in r.stdout + r.stderr for r in results.values())


async def test_a_tool_needing_approval_is_refused_on_the_nodes(ray_cluster, driver):
    from wasm_runner.profiles import McpServerConfig

    server = McpServerConfig(command=[sys.executable, str(MCP_SERVER)], env={"TRACKER_TOKEN": TOKEN})
    code = ("from sandbox import tools, ToolError\ntry:\n    tools.issue_title(number=1)\n"
            "except ToolError as e:\n    print(e.kind)")
    results = [r async for r in driver.run_many([ExecRequest(code=code, id="a")], cluster=RayCluster(**SETTINGS),
                                                mcp_servers=[server], approval_tools=["issue_title"])]
    assert results[0].stdout == "refused\n" and results[0].tool_calls[0].approval == "refused"

