"""Code mode: what one tool call from guest code costs, by where the tool lives.

    python benchmarks/bench_tools.py [--calls 200] [--rounds 3]

A session's Python kernel runs a program that calls a tool doing nothing `--calls` times and
times each call inside the guest (`time.perf_counter`), so the figures are the round trip a
guest sees: the host's decision (allowlist, budget, schema check), the tool's thread, and the
way back. Paths: a library callable with the guest in this process (`isolation="in-process"`;
also with `ToolPolicy(inline=True)`: the tool on the guest's own thread, no hand-off),
the same with the guest on a worker process (the default: the call goes up its pipe), and a
caller-side tool through the service (an event on the exec stream, answered by the typed
client's POST), against `wasm-runner serve` on loopback, and a local MCP server over stdio (the
official SDK, `mcp_noop_server.py`) as the tool source. Then code mode against tool calling: one
program making `--batch` calls of the MCP tool, timed whole from the host (the run included),
against as many separate round trips by an MCP client to the same server (what a client calling
the tool once per turn pays, model time aside). Prints one JSON object (p50 and p90 in
microseconds, medians over the rounds; the batch in milliseconds), with the machine's load and,
for scale, one round trip between two Python threads (the floor under the default library path,
which hands each call to a thread of the run's).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import start_server  # noqa: E402

from wasm_runner import Runner  # noqa: E402
from wasm_runner.tools import ToolPolicy  # noqa: E402
from wasm_runner.tools.mcp_source import McpTools  # noqa: E402
from wasm_runner_client import Client  # noqa: E402

TARGETS_US = {"library_in_process_p50_us": 50.0, "service_caller_side_p50_us": 2000.0}
"""The issue's targets: ≤ 50 µs added per call to a library callable, ≤ 2 ms p50 through the service."""

PROGRAM = """
import time
from sandbox import tools
times = []
for _ in range({calls}):
    t0 = time.perf_counter()
    tools.noop(n=1)
    times.append((time.perf_counter() - t0) * 1e6)
times.sort()
print(times[len(times) // 2], times[len(times) * 9 // 10])
"""


def noop(n: int) -> int:
    """Does nothing: the call's own cost is all there is."""
    return n


MCP_SERVER = Path(__file__).resolve().parent / "mcp_noop_server.py"

BATCH_PROGRAM = """
from sandbox import tools
total = sum(tools.noop(n=1) for _ in range({calls}))
print(total)
"""


def percentiles(stdout: str) -> tuple[float, float]:
    p50, p90 = stdout.split()
    return float(p50), float(p90)


def thread_round_trip(rounds: int = 2000) -> dict[str, float]:
    """Two Python threads handing a lock back and forth: the floor under any call that one thread hands
    to another and waits for (the default library path does, so that it can stop waiting at a timeout)."""
    there, back = threading.Lock(), threading.Lock()
    there.acquire()
    back.acquire()

    def other() -> None:
        for _ in range(rounds):
            there.acquire()
            back.release()

    worker = threading.Thread(target=other)
    worker.start()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        there.release()
        back.acquire()
        times.append((time.perf_counter() - started) * 1e6)
    worker.join()
    times.sort()
    return {"p50_us": round(times[len(times) // 2], 1), "p90_us": round(times[len(times) * 9 // 10], 1)}


def library(isolation: str, calls: int, rounds: int, policy: ToolPolicy = ToolPolicy()) -> dict[str, float]:
    with Runner(isolation=isolation) as runner:  # type: ignore[arg-type]
        session = runner.session()
        session.run_sync("1", tools=[noop])  # the kernel, the worker and the tool threads made once
        got = [percentiles(session.run_sync(PROGRAM.format(calls=calls), tools=[noop], tool_policy=policy).stdout)
               for _ in range(rounds)]
    return {"p50_us": round(statistics.median(g[0] for g in got), 1),
            "p90_us": round(statistics.median(g[1] for g in got), 1)}


async def service(calls: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data_dir:
        process, url = await start_server(data_dir)
        try:
            return await asyncio.to_thread(_through_client, url, calls, rounds)
        finally:
            process.terminate()
            process.wait(30)


def _through_client(url: str, calls: int, rounds: int) -> dict[str, float]:
    with Client(url, timeout=300) as client:
        sid = client.create_session().id
        client.exec(sid, "1", tools=[noop])
        got = []
        for _ in range(rounds):
            result = client.exec(sid, PROGRAM.format(calls=calls), tools=[noop], limits={"timeout_s": 120})
            got.append(percentiles(result.stdout))
    return {"p50_us": round(statistics.median(g[0] for g in got), 1),
            "p90_us": round(statistics.median(g[1] for g in got), 1)}


def mcp_stdio(calls: int, rounds: int, batch: int) -> tuple[dict[str, float], dict[str, float]]:
    """A guest calling the MCP server's tool (p50/p90 per call); then one program making `batch` calls
    against `batch` round trips of an MCP client (wall time of each, medians over the rounds)."""
    source = McpTools(command=[sys.executable, str(MCP_SERVER)])
    tools = source.start()
    try:
        with Runner() as runner:
            session = runner.session()
            session.run_sync("1", tools=tools)
            got = [percentiles(session.run_sync(PROGRAM.format(calls=calls), tools=tools).stdout)
                   for _ in range(rounds)]
            program_ms, trips_ms = [], []
            [noop_tool] = tools
            for _ in range(rounds):
                started = time.perf_counter()
                result = session.run_sync(BATCH_PROGRAM.format(calls=batch), tools=tools)
                program_ms.append((time.perf_counter() - started) * 1000)
                assert result.stdout.strip() == str(batch), result.stderr
                started = time.perf_counter()
                for _ in range(batch):
                    noop_tool.function(n=1)  # one tools/call round trip of the SDK's client each
                trips_ms.append((time.perf_counter() - started) * 1000)
    finally:
        source.close()
    per_call = {"p50_us": round(statistics.median(g[0] for g in got), 1),
                "p90_us": round(statistics.median(g[1] for g in got), 1)}
    compared = {"calls": batch, "one_program_ms": round(statistics.median(program_ms), 1),
                "separate_round_trips_ms": round(statistics.median(trips_ms), 1)}
    return per_call, compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    in_process = library("in-process", args.calls, args.rounds)
    inline = library("in-process", args.calls, args.rounds, ToolPolicy(inline=True))
    on_worker = library("process", args.calls, args.rounds)
    over_http = asyncio.run(service(args.calls, args.rounds))
    over_mcp, program_vs_trips = mcp_stdio(args.calls, args.rounds, args.batch)
    floor = thread_round_trip()
    print(json.dumps({
        "benchmark": "tools",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "calls_per_round": args.calls,
        "rounds": args.rounds,
        "library_in_process": in_process,
        "library_in_process_inline": inline,
        "thread_round_trip": floor,
        "library_worker_process": on_worker,
        "service_caller_side": over_http,
        "mcp_stdio": over_mcp,
        "program_vs_round_trips": program_vs_trips,
        "targets_us": TARGETS_US,
    }, indent=2))


if __name__ == "__main__":
    main()
