"""Native provider benchmark: prints one JSON object measured in one run.

    python benchmarks/bench_native.py [--samples 200]

Spawn overhead of `true` through the native provider (bubblewrap sandbox, per-run cgroup
or rlimits, capture, workspace diff) against a plain `subprocess.run(["true"])`, with the
three measured interleaved so machine noise hits them alike. Also: the bare bwrap command
line alone (what the sandbox itself costs), the rlimit-only path, and a session's bash turn
through the Runner. Target: overhead p50 <= 15 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wasm_runner import ExecRequest, Runner
from wasm_runner.providers.base import Job
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native import bwrap as sandbox
from wasm_runner.providers.native.limits import wait_for_cleanup
from wasm_runner.workspace.layout import Workspace

TARGET_OVERHEAD_P50_MS = 15.0


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50_ms": round(statistics.median(ordered), 3), "p90_ms": round(pick(0.9), 3),
            "p99_ms": round(pick(0.99), 3), "n": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-native-") as root:
        return measure(args, Path(root))


def measure(args: argparse.Namespace, root: Path) -> int:
    workspace = Workspace(root / "ws").ensure()
    provider = NativeProvider()
    rlimit_provider = NativeProvider(cgroups="off")
    bwrap_path, problem, support = provider.environment()
    if problem is not None:
        print(json.dumps({"error": f"no usable sandbox: {problem}"}))
        return 1
    request = ExecRequest(command=["true"])
    bare = sandbox.argv(bwrap_path, provider.policy, workspace=workspace.files, tmp=workspace.tmp,
                        env=sandbox.sandbox_env(python_data=False, extra={}), command=["true"])

    def plain() -> None:
        subprocess.run(["true"], check=True)

    def bare_bwrap() -> None:
        subprocess.run(bare, check=True, env={"PATH": sandbox.BASE_PATH})

    def native() -> None:
        result = provider.execute(Job(request, workspace))
        assert result.exit_code == 0 and result.isolation == "bubblewrap", result

    def native_rlimit() -> None:
        result = rlimit_provider.execute(Job(request, workspace))
        assert result.exit_code == 0 and result.enforcement == "rlimit", result

    cases = {"plain_subprocess": plain, "bare_bwrap": bare_bwrap, "native_provider": native,
             "native_provider_rlimit": native_rlimit}
    for fn in cases.values():  # warm caches (etc copy, cgroup detection, page cache)
        for _ in range(5):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.samples):
        for name in random.sample(list(cases), len(cases)):
            started = time.perf_counter()
            cases[name]()
            samples[name].append((time.perf_counter() - started) * 1000)
            time.sleep(0.001)  # let the background cgroup cleaner and the kernel settle between spawns

    # Paired overhead: each native sample against the plain sample of the same round.
    paired = [n - p for n, p in zip(samples["native_provider"], samples["plain_subprocess"], strict=True)]
    figures = {name: percentiles(values) for name, values in samples.items()}

    with Runner(root / "runner", isolation="in-process", providers=[provider]) as runner:
        session = runner.session()
        session.run_sync("true", language="bash")
        turns = []
        for _ in range(max(20, args.samples // 4)):
            started = time.perf_counter()
            session.run_sync("echo 2", language="bash")
            turns.append((time.perf_counter() - started) * 1000)
    wait_for_cleanup(10)

    overhead_p50 = round(statistics.median(paired), 3)
    print(json.dumps({
        "benchmark": "native_spawn_overhead",
        "machine": {"cpus": __import__("os").cpu_count(), "kernel": platform.release(),
                    "python": platform.python_version(), "enforcement": support.enforcement},
        "true": figures,
        "overhead_vs_plain_ms": {
            "native_provider_p50": overhead_p50,
            "native_provider_p90": percentiles(paired)["p90_ms"],
            "bare_bwrap_p50": round(figures["bare_bwrap"]["p50_ms"] - figures["plain_subprocess"]["p50_ms"], 3),
            "provider_beyond_bwrap_p50": round(figures["native_provider"]["p50_ms"] - figures["bare_bwrap"]["p50_ms"], 3),
        },
        "session_bash_turn_via_runner": percentiles(turns),
        "target_overhead_p50_ms": TARGET_OVERHEAD_P50_MS,
        "meets_target": overhead_p50 <= TARGET_OVERHEAD_P50_MS,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
