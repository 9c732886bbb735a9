"""Web starters: from the call that makes a session from a starter to its dev server listening.

    python benchmarks/bench_web_starters.py [--runs 3]

For each starter (after `wasm-runner prepare` installed them): make a session from it
(`runner.session(starter=...)`), start `npm run dev` as a background process with the network
off, and poll the sandbox's listening ports (every 20 ms) until the dev server's port shows. Prints
one JSON object: per starter, the creation call's time and the time to listening (median and
each run), and the installed node_modules' size. Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.web_starters import find_starter

PORTS = {"vite-react": 5173, "tanstack-start": 3000}
LISTEN_BOUND_S = 120


def measure(runner: Runner, starter: str) -> dict[str, float]:
    began = time.perf_counter()
    session = runner.session(starter=starter)
    created = time.perf_counter()
    process = session.start_process(["npm", "run", "dev"], limits=Limits(memory_bytes=1 << 30, timeout_s=600))
    try:
        while PORTS[starter] not in process.ports():
            if process.state not in ("starting", "running") or time.perf_counter() - began > LISTEN_BOUND_S:
                raise RuntimeError(f"{starter}'s dev server did not listen: {process.state} {process.error()}")
            time.sleep(0.02)
        listening = time.perf_counter()
    finally:
        process.kill()
    return {"create_ms": round((created - began) * 1000, 1), "listening_s": round(listening - began, 2)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, object] = {"machine": platform.machine(), "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as data, Runner(Path(data), isolation="in-process",
                                                         providers=[NativeProvider()]) as runner:
        for starter in PORTS:
            installed = find_starter(starter)
            if installed is None:
                print(f"{starter} is not installed: run `wasm-runner prepare`", file=sys.stderr)
                return 1
            runs = [measure(runner, starter) for _ in range(args.runs)]
            results[starter] = {
                "node_modules_bytes": installed.bytes, "node_modules_files": installed.files,
                "create_ms_median": statistics.median(r["create_ms"] for r in runs),
                "listening_s_median": statistics.median(r["listening_s"] for r in runs), "runs": runs}
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
