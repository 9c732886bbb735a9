"""Background processes and preview ports over HTTP; prints one JSON object measured in one run.

    python benchmarks/bench_processes.py [--requests 400] [--starts 30]

Starts the service in its own process (as bench_http.py does; preview ports need it to run as
root, since the host enters each sandbox's network namespace), then on one session:

- preview proxy against direct: a small dev server (tests/helpers/sandbox_devserver.py, 40-byte
  body with Content-Length) runs as a background process in its sandbox. The same GET is sent,
  alternately, through the preview's own origin (`GET /` with its Host) on a keep-alive connection to the
  service, and directly: a socket made in the sandbox's network namespace from this process
  (setns on a helper thread, exactly how the proxy makes its upstream connections) and connected
  to the server's loopback port, also kept alive. Both use the same lean HTTP/1.1 client on the
  same event loop; the difference of the p50s is what the proxy adds (target <= 2 ms).
- process start: from sending `POST /v1/sessions/{id}/processes` to its first output byte (a
  long poll on `GET .../output?wait_s=`), for `echo` and for `python3 -c print(...)`; also when
  the start request was answered (the process id, before its sandbox has run anything).

Figures only, no assertions; the first requests of each path warm it up and are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yarl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

from bench_http import percentile, start_server, wait_ready  # noqa: E402
from host_processes import host_processes_running  # noqa: E402

from wasm_runner.processes.netns import socket_in  # noqa: E402
from wasm_runner_server.cli.serve import event_loop_factory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEVSERVER = ROOT / "tests" / "helpers" / "sandbox_devserver.py"
PORT = 8000
WARM = 20
TARGET_ADDED_P50_MS = 2.0
START_COMMANDS = {"echo": ["echo", "x"], "python3": ["python3", "-c", "print('x')"]}


class LeanGet:
    """One keep-alive HTTP/1.1 connection sending the same GET again and again (sized answers only)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, host: str) -> None:
        self.reader, self.writer = reader, writer
        self.request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()

    async def get(self) -> tuple[int, bytes]:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
        return status, await self.reader.readexactly(int(headers["content-length"]))

    def close(self) -> None:
        self.writer.close()


def summary(times: list[float]) -> dict[str, float]:
    kept = times[WARM:] if len(times) > 2 * WARM else times
    return {"p50_ms": round(statistics.median(kept), 3), "p90_ms": round(percentile(kept, 90), 3),
            "min_ms": round(min(kept), 3), "n": len(kept)}


async def direct_connection(port: int, host_pid: int) -> LeanGet:
    """A connection to the dev server made inside its sandbox's network namespace (as the proxy does)."""
    sock = await asyncio.to_thread(socket_in, host_pid)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    return LeanGet(reader, writer, "/", f"127.0.0.1:{port}")


async def devserver_pid(port: int) -> int:
    argv = ["python3", "devserver.py", str(port)]
    for _ in range(500):
        found = host_processes_running(argv)
        if found:
            return found[0]
        await asyncio.sleep(0.02)
    raise RuntimeError("the dev server's host process was not found")


async def proxy_and_direct(http: aiohttp.ClientSession, url: str, sid: str, requests: int) -> dict:
    async with http.put(f"{url}/v1/sessions/{sid}/files/devserver.py", data=DEVSERVER.read_bytes()) as response:
        response.raise_for_status()
    async with http.post(f"{url}/v1/sessions/{sid}/processes",
                         json={"command": ["python3", "devserver.py", str(PORT)], "name": "dev"}) as response:
        if response.status != 201:
            raise RuntimeError(f"the dev server did not start: {await response.text()}")
        pid = (await response.json())["id"]
    for _ in range(500):
        async with http.get(f"{url}/v1/sessions/{sid}/processes/{pid}") as response:
            if PORT in (await response.json()).get("ports", []):
                break
        await asyncio.sleep(0.02)
    else:
        raise RuntimeError("the dev server never listened")
    # the preview's own origin (`{port}-{grant}.localhost:{preview port}`), as the API's redirect names it
    async with http.get(f"{url}/v1/sessions/{sid}/ports/{PORT}/", allow_redirects=False) as response:
        preview = yarl.URL(response.headers["Location"])
    reader, writer = await asyncio.open_connection("127.0.0.1", preview.port)
    proxy = LeanGet(reader, writer, "/", f"{preview.host}:{preview.port}")
    direct = await direct_connection(PORT, await devserver_pid(PORT))
    times: dict[str, list[float]] = {"proxy": [], "direct": []}
    bodies: dict[str, bytes] = {}
    errors = 0
    try:
        for _ in range(requests + WARM):
            for name, connection in (("proxy", proxy), ("direct", direct)):
                started = time.perf_counter()
                status, body = await connection.get()
                times[name].append((time.perf_counter() - started) * 1000)
                bodies[name] = body
                errors += status != 200
    finally:
        proxy.close()
        direct.close()
    if bodies["proxy"] != bodies["direct"]:
        raise RuntimeError(f"the two paths answered differently: {bodies}")
    figures = {"proxy": summary(times["proxy"]), "direct_in_netns": summary(times["direct"])}
    added = round(figures["proxy"]["p50_ms"] - figures["direct_in_netns"]["p50_ms"], 3)
    return {**figures, "body_bytes": len(bodies["proxy"]), "errors": errors, "added_p50_ms": added,
            "target_added_p50_ms": TARGET_ADDED_P50_MS, "target_met": added <= TARGET_ADDED_P50_MS}


async def start_latency(http: aiohttp.ClientSession, url: str, sid: str, starts: int) -> dict:
    base = f"{url}/v1/sessions/{sid}/processes"
    results = {}
    for name, command in START_COMMANDS.items():
        answered: list[float] = []
        first_byte: list[float] = []
        for _ in range(starts + 2):  # the first two warm the sandbox's set-up
            started = time.perf_counter()
            async with http.post(base, json={"command": command, "stdin": False}) as response:
                if response.status != 201:
                    raise RuntimeError(f"start failed: {await response.text()}")
                pid = (await response.json())["id"]
            answered.append((time.perf_counter() - started) * 1000)
            async with http.get(f"{base}/{pid}/output", params={"offset": "0", "wait_s": "30"}) as response:
                out = await response.json()
            if not out["data"]:
                raise RuntimeError(f"no output from {command}: {out}")
            first_byte.append((time.perf_counter() - started) * 1000)
        results[name] = {"command": command, "first_output_byte": summary(first_byte[2:]),
                         "start_answered": summary(answered[2:])}
    return results


async def bench(requests: int, starts: int) -> dict:
    if os.geteuid() != 0:
        raise SystemExit("preview ports need the service to run as root (it enters the sandboxes' network namespaces)")
    load_before = os.getloadavg()
    data_dir = tempfile.TemporaryDirectory(prefix="bench-processes-")
    process, url = await start_server(data_dir.name)
    try:
        async with aiohttp.ClientSession() as http:
            await wait_ready(http, url)
            async with http.post(url + "/v1/sessions", json={"profile": "bash"}) as response:
                sid = (await response.json())["id"]
            ports = await proxy_and_direct(http, url, sid, requests)
            async with http.post(url + "/v1/sessions", json={"profile": "bash"}) as response:
                other = (await response.json())["id"]
            started = await start_latency(http, url, other, starts)
    finally:
        process.terminate()
        process.wait(30)
        data_dir.cleanup()
    return {
        "benchmark": "processes",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "load_average_1m": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}},
        "preview_get": ports,
        "process_start": started,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="GETs per path, after the warm-up")
    parser.add_argument("--starts", type=int, default=30, help="process starts per command")
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        print(json.dumps(runner.run(bench(args.requests, args.starts)), indent=2))


if __name__ == "__main__":
    main()
