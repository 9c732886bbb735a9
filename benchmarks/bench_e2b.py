"""Latency of the E2B-compatible API as the real `e2b-code-interpreter` SDK sees it; prints JSON.

Starts `python -m wasm_runner_server serve` with `[e2b] enabled = true` (keys off) in its own
process, points the SDK at it (E2B_API_URL, E2B_SANDBOX_URL, E2B_HTTP_VERSION=1.1) and times, one
call at a time: Sandbox.create + kill, files.write, files.read, files.list, commands.run("true"),
run_code("1 + 1") in a warm kernel, and the same run through the service's own API
(POST /v1/sessions/{id}/exec) to show what the gateway adds. p50/p90 in ms over `--calls` calls.
Figures only, no assertions.

    python benchmarks/bench_e2b.py [--calls 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def start_server(data_dir: str) -> tuple[subprocess.Popen, str]:
    config = Path(data_dir) / "e2b.toml"
    config.write_text("[e2b]\nenabled = true\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "wasm_runner_server", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", data_dir, "--config", str(config), "--no-auth", "--no-access-log"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 300
    assert process.stderr is not None
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            raise RuntimeError("the server exited before listening")
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "listening":
            threading.Thread(target=lambda: [None for _ in process.stderr or ()], daemon=True).start()
            return process, entry["url"]
    raise RuntimeError("the server did not start listening")


def timed(call: Callable[[], object], calls: int) -> dict[str, float]:
    call()  # warm: connections, the kernel
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 2), "p90_ms": round(samples[int(0.9 * (len(samples) - 1))], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-e2b-") as data_dir:
        process, url = start_server(data_dir)
        try:
            os.environ.update(E2B_API_URL=url + "/e2b", E2B_SANDBOX_URL=url + "/e2b/sandbox", E2B_API_KEY="local",
                              E2B_HTTP_VERSION="1.1")
            from e2b_code_interpreter import Sandbox

            figures: dict[str, dict[str, float]] = {"create_and_kill": timed(lambda: Sandbox.create().kill(), args.calls)}
            sandbox = Sandbox.create()
            figures["files_write"] = timed(lambda: sandbox.files.write("bench.txt", "x" * 1024), args.calls)
            figures["files_read"] = timed(lambda: sandbox.files.read("bench.txt"), args.calls)
            figures["files_list"] = timed(lambda: sandbox.files.list("/workspace"), args.calls)
            figures["commands_run_true"] = timed(lambda: sandbox.commands.run("true"), args.calls)
            figures["run_code"] = timed(lambda: sandbox.run_code("1 + 1"), args.calls)
            with httpx.Client(base_url=url, timeout=60) as http:
                figures["api_exec_same_run"] = timed(lambda: http.post(
                    f"/v1/sessions/{sandbox.sandbox_id}/exec", json={"code": "1 + 1", "profile": "python-data"}),
                    args.calls)
            sandbox.kill()
            print(json.dumps({"calls": args.calls, "figures": figures}, indent=2))
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
