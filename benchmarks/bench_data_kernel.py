"""Data-science kernel benchmark: prints one JSON object measured in one run.

    python benchmarks/bench_data_kernel.py [--samples 5] [--turns 50]

The first pandas call of a new python-data session, (a) answered by a kernel made ahead
(the data stack already imported, the session's directory bound into its running sandbox),
(b) by a kernel started on that call (no kernel made ahead); against (c) today's per-call
native process (`fresh: true`, a new sandboxed interpreter each call) and (d) a plain
unsandboxed `python -c` of the python-data interpreter with the same imports; (a)-(d)
interleaved. Then the overhead of a later call in a live kernel: a call that does nothing,
and a small pandas call against the same code timed inside the kernel. Targets: first call
<= 150 ms, a later call <= 5 ms over the code's own time. Needs root (kernels are made ahead
by a root service) and the python-data environment.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.toolchain import find_python_data

FIRST_CALL = ("import pandas as pd, numpy as np, matplotlib.pyplot as plt\n"
              "df = pd.DataFrame({'x': np.arange(100), 'y': np.arange(100) * 2.0})\n"
              "print(float(df.y.mean()))")
IMPORTS = "import pandas as pd, numpy as np, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt"
TARGET_FIRST_CALL_MS = 150.0
TARGET_LATER_OVERHEAD_MS = 5.0
LIMITS = Limits(timeout_s=120)


def summary(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {"p50_ms": round(statistics.median(ordered), 2), "min_ms": round(ordered[0], 2),
            "max_ms": round(ordered[-1], 2), "n": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    data = find_python_data()
    if data is None:
        print(json.dumps({"error": "the python-data environment is not built (wasm-runner prepare)"}))
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-data-kernel-") as root:
        return measure(args, Path(root), str(data.interpreter))


def measure(args: argparse.Namespace, root: Path, interpreter: str) -> int:
    ahead = NativeProvider(ready_kernels=1)
    cold = NativeProvider(ready_kernels=0)
    _, problem, support = ahead.environment()
    if problem is not None:
        print(json.dumps({"error": f"no usable sandbox: {problem}"}))
        return 1
    with Runner(root / "ahead", isolation="in-process", providers=[ahead]) as ahead_runner, \
            Runner(root / "cold", isolation="in-process", providers=[cold]) as cold_runner:
        ahead.prepare()
        pool = ahead.kernel_pool()

        def wait_for_pool() -> None:
            deadline = time.monotonic() + 120
            while pool is not None and not pool.ready_count() and time.monotonic() < deadline:
                time.sleep(0.1)

        def first_call(runner: Runner, **fields: object) -> float:
            session = runner.session()
            started = time.perf_counter()
            result = session.run_sync(FIRST_CALL, language="python", provider="native", limits=LIMITS, **fields)
            elapsed = (time.perf_counter() - started) * 1000
            assert result.error is None and result.stdout == "99.0\n", (result.error, result.stderr[-500:])
            session.hibernate()
            return elapsed

        def plain() -> float:
            started = time.perf_counter()
            subprocess.run([interpreter, "-c", IMPORTS], check=True, env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
            return (time.perf_counter() - started) * 1000

        cases = {
            "kernel_made_ahead": lambda: first_call(ahead_runner),
            "kernel_started_on_first_call": lambda: first_call(cold_runner),
            "per_call_native_process": lambda: first_call(cold_runner, fresh=True),
            "plain_python_c_same_imports": plain,
        }
        plain()  # page cache
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.samples):
            for name in random.sample(list(cases), len(cases)):
                if name == "kernel_made_ahead":
                    wait_for_pool()
                samples[name].append(cases[name]())

        session = ahead_runner.session()
        session.run_sync("import pandas as pd, time\ndf = pd.DataFrame({'x': range(1000)})", language="python",
                         provider="native", limits=LIMITS)
        empty, pandas_call, inside = [], [], []
        for _ in range(args.turns):
            started = time.perf_counter()
            session.run_sync("pass", language="python", provider="native", limits=LIMITS)
            empty.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            result = session.run_sync("t = time.perf_counter(); s = int(df.x.sum()); t = time.perf_counter() - t\n(s, t)",
                                      language="python", provider="native", limits=LIMITS)
            pandas_call.append((time.perf_counter() - started) * 1000)
            inside.append(float(result.value.split(", ")[1].rstrip(")")) * 1000)

    overhead = [outer - own for outer, own in zip(pandas_call, inside, strict=True)]
    first = summary(samples["kernel_made_ahead"])
    print(json.dumps({
        "benchmark": "data_kernel",
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "enforcement": support.enforcement},
        "first_pandas_call_of_a_new_session": {name: summary(values) for name, values in samples.items()},
        "later_call": {"empty_call": summary(empty), "small_pandas_call": summary(pandas_call),
                       "overhead_over_the_codes_own_time": summary(overhead)},
        "targets": {"first_call_ms": TARGET_FIRST_CALL_MS, "later_overhead_ms": TARGET_LATER_OVERHEAD_MS},
        "meets_targets": first["p50_ms"] <= TARGET_FIRST_CALL_MS
                         and statistics.median(overhead) <= TARGET_LATER_OVERHEAD_MS,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
