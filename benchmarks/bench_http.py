"""HTTP latency and throughput of the service over loopback; prints JSON.

Starts `python -m wasm_runner_server serve` in its own process (so the load generator does not
share the server's interpreter), then measures, at concurrency 1 and 8:

- one-shot: POST /v1/exec {"code": "print(1+1)"}
- session turn: POST /v1/sessions/{id}/exec {"code": "print(1+1)"} (one session per client)

and reports p50/p90/p99 latency (ms), requests/s and errors (any non-200, or a result
other than stdout "2\\n" and exit code 0), and the CPU time the server and the load
generator spent per request. The four scenarios run in `--rounds` rounds (3 by default):
each figure is the median of the rounds, `per_round` keeps every round's p50, p99 and
requests/s, and the targets are judged on the medians (this machine's speed drifts from
minute to minute). Figures only, no assertions.

The load generator shares the machine's cores with the server, so by default it is a
lean one: keep-alive HTTP/1.1 connections that send a prepared request and parse the
response's status line, headers and JSON body, on the event loop the server uses (uvloop
where installed): about 0.2 ms of CPU a request here, against 0.6-1.4 ms for aiohttp's
client. `--client aiohttp` measures with aiohttp's client instead, as a Python service
calling this one would see it.

    python benchmarks/bench_http.py [--requests 400] [--rounds 3] [--client lean|aiohttp] [--url http://127.0.0.1:8080]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from wasm_runner_server.cli.serve import event_loop_factory

ROOT = Path(__file__).resolve().parents[1]
CODE = {"code": "print(1+1)"}
TARGETS = {"oneshot_p50_ms_c1": 5.0, "session_p50_ms_c1": 3.0, "p99_ms_c8": 25.0}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def start_server(data_dir: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "wasm_runner_server", "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", data_dir,
         "--no-auth", "--log-level", "INFO", "--no-access-log"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    # the "listening" line carries the port; later lines are not needed
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = await loop.run_in_executor(None, process.stderr.readline)
        if not line:
            raise RuntimeError("the server exited before listening")
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "listening":
            threading.Thread(target=_drain, args=(process.stderr,), daemon=True).start()
            return process, entry["url"]
    raise RuntimeError("the server did not start listening")


def _drain(stream) -> None:
    """Keep reading the server's log so it never blocks on a full pipe."""
    for _ in stream:
        pass


async def wait_ready(http: aiohttp.ClientSession, url: str) -> None:
    for _ in range(3000):
        async with http.get(url + "/readyz") as response:
            if response.status == 200:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError("the server never became ready")


class LeanConnection:
    """One keep-alive HTTP/1.1 connection that POSTs the same JSON body again and again."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def __aenter__(self) -> LeanConnection:
        parts = urlsplit(self.url)
        body = json.dumps(CODE).encode()
        self.request = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        self.reader, self.writer = await asyncio.open_connection(parts.hostname, parts.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()

    async def post(self) -> tuple[int, bytes]:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
        if "content-length" not in headers:
            raise RuntimeError(f"a response without Content-Length (status {status}): not supported here")
        return status, await self.reader.readexactly(int(headers["content-length"]))


class AiohttpConnection:
    """The same requests through aiohttp's client."""

    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url, self.http = url, http

    async def __aenter__(self) -> AiohttpConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def post(self) -> tuple[int, bytes]:
        async with self.http.post(self.url, json=CODE) as response:
            return response.status, await response.read()


def process_cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds of a process and its live children (the service's worker
    processes), from /proc (None where there is none)."""
    own = _stat(pid)
    if own is None:
        return None
    ticks = own[1]
    for entry in os.listdir("/proc"):
        child = _stat(int(entry)) if entry.isdigit() else None
        if child is not None and child[0] == pid:
            ticks += child[1]
    return ticks / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, user plus system ticks) of a process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12])


async def measure(connect, urls: list[str], total: int, server_pid: int | None = None) -> dict:
    """`len(urls)` clients, each on its own connection, sending requests to its URL back to back."""
    latencies: list[float] = []
    errors = 0
    remaining = total

    async def client(url: str) -> None:
        nonlocal remaining, errors
        async with connect(url) as connection:
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                status, body = await connection.post()
                latencies.append((time.perf_counter() - started) * 1000)
                if status != 200:
                    errors += 1
                    continue
                result = json.loads(body)
                if result.get("stdout") != "2\n" or result.get("exit_code") != 0:
                    errors += 1

    server_before = process_cpu_s(server_pid) if server_pid else None
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(client(url) for url in urls))
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_before
    server_after = process_cpu_s(server_pid) if server_pid else None
    server_cpu = server_after - server_before if server_before is not None and server_after is not None else None
    return {
        "requests": len(latencies),
        "concurrency": len(urls),
        "p50_ms": round(percentile(latencies, 50), 3),
        "p90_ms": round(percentile(latencies, 90), 3),
        "p99_ms": round(percentile(latencies, 99), 3),
        "mean_ms": round(statistics.fmean(latencies), 3),
        "max_ms": round(max(latencies), 3),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "errors": errors,
        "server_cpu_ms_per_request": round(server_cpu * 1000 / len(latencies), 2) if server_cpu is not None else None,
        "client_cpu_ms_per_request": round(client_cpu * 1000 / len(latencies), 2),
    }


def median_of_rounds(rounds: list[dict]) -> dict:
    """One scenario's figures over the rounds: medians, and the counts summed."""
    merged = {key: round(statistics.median(r[key] for r in rounds), 3) for key in rounds[0]
              if key not in ("requests", "concurrency", "errors") and rounds[0][key] is not None}
    return {"requests": sum(r["requests"] for r in rounds), "concurrency": rounds[0]["concurrency"],
            "errors": sum(r["errors"] for r in rounds), **merged}


async def core_baseline(requests: int) -> dict:
    """The same runs through the library directly, in this process: what HTTP adds is the difference."""
    from wasm_runner import ExecRequest, Runner

    request = ExecRequest(code=CODE["code"])
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-core-") as data_dir, Runner(data_dir, isolation="in-process") as runner:
        session = runner.session("bench")
        for name, run in (("oneshot", lambda: runner.run(request)), ("session_turn", lambda: session.run(request))):
            for _ in range(50):
                await run()
            latencies = []
            for _ in range(requests):
                started = time.perf_counter()
                await run()
                latencies.append((time.perf_counter() - started) * 1000)
            figures[f"{name}_p50_ms"] = round(percentile(latencies, 50), 3)
            figures[f"{name}_p99_ms"] = round(percentile(latencies, 99), 3)
    return figures


async def bench(url: str | None, requests: int, client: str, rounds: int) -> dict:
    load_before = os.getloadavg()
    process = None
    data_dir = tempfile.TemporaryDirectory(prefix="bench-http-")
    if url is None:
        process, url = await start_server(data_dir.name)
    try:
        connector = aiohttp.TCPConnector(limit=64, force_close=False)
        async with aiohttp.ClientSession(connector=connector) as http:
            await wait_ready(http, url)

            async def new_session() -> str:
                async with http.post(url + "/v1/sessions", json={}) as response:
                    return url + f"/v1/sessions/{(await response.json())['id']}/exec"

            sessions = [await new_session() for _ in range(8)]
            oneshot = url + "/v1/exec"
            connect = LeanConnection if client == "lean" else lambda u: AiohttpConnection(u, http)
            pid = process.pid if process is not None else None
            await measure(connect, [oneshot] * 2, 100)  # warm-up: runtimes, pools, connections
            await measure(connect, sessions, 100)
            clients = {"oneshot_c1": [oneshot], "session_turn_c1": sessions[:1],
                       "oneshot_c8": [oneshot] * 8, "session_turn_c8": sessions}
            measured: dict[str, list[dict]] = {name: [] for name in clients}
            for _ in range(rounds):
                for name in clients:
                    total = requests * (2 if name.endswith("c8") else 1)
                    measured[name].append(await measure(connect, clients[name], total, pid))
            results = {name: median_of_rounds(runs) for name, runs in measured.items()}
            per_round = {name: {key: [r[key] for r in runs] for key in ("p50_ms", "p99_ms", "requests_per_s")}
                         for name, runs in measured.items()}
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        data_dir.cleanup()
    load_after = os.getloadavg()
    baseline = await core_baseline(requests)
    met = {
        "oneshot_p50_ms_c1": results["oneshot_c1"]["p50_ms"] <= TARGETS["oneshot_p50_ms_c1"],
        "session_p50_ms_c1": results["session_turn_c1"]["p50_ms"] <= TARGETS["session_p50_ms_c1"],
        "p99_ms_c8": max(results["oneshot_c8"]["p99_ms"], results["session_turn_c8"]["p99_ms"]) <= TARGETS["p99_ms_c8"],
        "zero_errors": all(r["errors"] == 0 for r in results.values()),
    }
    return {
        "benchmark": "http",
        "code": CODE["code"],
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_average_1m": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)}},
        "server": {"url": url, "spawned": process is not None},
        "client": "lean keep-alive HTTP/1.1" if client == "lean" else f"aiohttp {aiohttp.__version__}",
        "rounds": rounds,
        "results": results,
        "per_round": per_round,
        "core_baseline_in_process": baseline,
        "targets": TARGETS,
        "targets_met": met,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="benchmark a running server instead of starting one")
    parser.add_argument("--requests", type=int, default=400, help="requests per concurrency-1 scenario (x2 at 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the four scenarios; figures are medians")
    parser.add_argument("--client", choices=("lean", "aiohttp"), default="lean",
                        help="load generator: a lean HTTP/1.1 client (default) or aiohttp's")
    args = parser.parse_args()
    # The load generator runs on the event loop the server uses (uvloop where installed).
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        print(json.dumps(runner.run(bench(args.url, args.requests, args.client, max(1, args.rounds))), indent=2))


if __name__ == "__main__":
    main()
