"""Kernel snapshot benchmark: prints one JSON object measured in one run.

    python benchmarks/bench_snapshots.py [--samples 7]

For a Python kernel holding about 1 MiB and about 50 MiB of its own data, and a JavaScript
kernel holding about 1 MiB: capture (the pages copied out of a kernel at rest), the incremental
checkpoint taken before each call (the rollback's cost, after a small call), encoding for disk
(LZ4) and the image's size, restore (a new instance taking the image; spaced as in a service, and
back to back), fork of 1, 8 and 64 children after a call changed the state (`Session.fork`: the
kernels saved, the directory copied), and the first call after
hibernation (restored) against today's rebuild (a new kernel, and a new kernel re-running the
code that made the data). In the same run, `os.fork()` of a native CPython process holding the
same data, the nearest conventional alternative. Medians; the machine's load is printed with
them. Targets on a 2-core machine: capture <= 5 ms and restore <= 5 ms for the small kernel,
one fork <= 5 ms, 8 forks <= 25 ms, the first call after hibernation <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wasm_runner import Runner
from wasm_runner.providers.wasm.sandbox import View
from wasm_runner.snapshots.image import encode

KERNELS = {
    "python_1mib": ("python", "import os\ndata = os.urandom(1 << 20)"),
    "python_50mib": ("python", "import os\nchunk = os.urandom(1 << 20)\ndata = [bytes(chunk) + bytes([i]) for i in range(50)]"),
    "javascript_1mib": ("javascript", "var data = new Uint8Array(1 << 20).map((_, i) => (i * 2654435761) >>> 24);"),
}
SMALL_CALL = {"python": "x = len(data)", "javascript": "var x = data.length;"}
SPACING_S = 0.1
"""Between two restores or forks measured: a service's next one finds the instance made ahead for it
(`restore_back_to_back_ms` measures restores in a row, each making its own)."""
NATIVE = {"python_1mib": "data = os.urandom(1 << 20)",
          "python_50mib": "chunk = os.urandom(1 << 20); data = [bytes(chunk) + bytes([i]) for i in range(50)]"}


def ms(f) -> float:
    start = time.perf_counter()
    f()
    return (time.perf_counter() - start) * 1000


def med(samples: list[float]) -> float:
    return round(statistics.median(samples), 3)


def kernel_of(session, language: str):
    return session.state.kernels[language].kernel


def measure_kernel(runner: Runner, name: str, samples: int) -> dict:
    language, setup = KERNELS[name]
    session = runner.session()
    assert session.run_sync(setup, language=language).error is None
    kernel = kernel_of(session, language)
    runtime = runner.providers[0].runtime(language)
    view = View(session.workspace.files, session.workspace.tmp, session.mounts)
    captures = [ms(kernel.capture) for _ in range(samples)]
    image = kernel.capture()
    checkpoints = []
    for _ in range(samples):
        session.run_sync(SMALL_CALL[language], language=language)  # a call writes a few pages...
        kernel = kernel_of(session, language)
        checkpoints.append(ms(kernel.checkpoint))  # ...which the next call's checkpoint copies
    encodes = [ms(lambda: encode(image)) for _ in range(samples)]
    restored, back_to_back = [], []
    for spaced in (True, False):
        for _ in range(samples):
            if spaced:  # as restores come in a service: the instance made ahead for one is ready
                time.sleep(SPACING_S)
            started = time.perf_counter()
            other = runtime.restored_kernel(view, runner.limits, image)
            (restored if spaced else back_to_back).append((time.perf_counter() - started) * 1000)
            other.close()
    forks = {}
    for count in (1, 8, 64):
        times = []
        for _ in range(max(samples // (4 if count == 64 else 1), 1)):
            session.run_sync(SMALL_CALL[language], language=language)  # a state changed since the last fork
            time.sleep(SPACING_S)
            started = time.perf_counter()
            result = session.fork(count)
            times.append((time.perf_counter() - started) * 1000)
            assert len(result.children) == count, result.failed
            for child in result.children:
                child.destroy()
        forks[f"fork_{count}_ms"] = med(times)
    after_hibernation, rebuild_empty, rebuild_rerun = [], [], []
    for _ in range(samples):
        session.hibernate()
        time.sleep(SPACING_S)
        started = time.perf_counter()
        back = session.run_sync(SMALL_CALL[language], language=language)
        after_hibernation.append((time.perf_counter() - started) * 1000)
        assert back.kernel_restored and back.error is None, back
        empty, rerun = runner.session(), runner.session()
        rebuild_empty.append(ms(lambda s=empty: s.run_sync("1", language=language)))
        rebuild_rerun.append(ms(lambda s=rerun: (s.run_sync(setup, language=language),
                                                 s.run_sync(SMALL_CALL[language], language=language))))
        empty.destroy()
        rerun.destroy()
    session.destroy()
    return {"memory_mib": round(image.memory_size / (1 << 20), 1), "pages_kept": len(image.pages),
            "image_bytes_raw": image.nbytes, "image_bytes_lz4": len(encode(image)),
            "capture_ms": med(captures), "checkpoint_before_call_ms": med(checkpoints), "encode_lz4_ms": med(encodes),
            "restore_ms": med(restored), "restore_back_to_back_ms": med(back_to_back), **forks,
            "first_call_after_hibernation_ms": med(after_hibernation),
            "rebuild_new_kernel_first_call_ms": med(rebuild_empty), "rebuild_rerunning_setup_ms": med(rebuild_rerun)}


NATIVE_FORK = r"""
import os, statistics, sys, time
{setup}
times = []
for _ in range(int(sys.argv[1])):
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    times.append((time.perf_counter() - start) * 1000)
    os.waitpid(pid, 0)
print(statistics.median(times))
"""


def native_fork_ms(name: str, samples: int) -> float:
    code = NATIVE_FORK.format(setup="import os\n" + NATIVE[name])
    done = subprocess.run([sys.executable, "-c", code, str(samples)], capture_output=True, text=True, check=True)
    return round(float(done.stdout), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args()
    load_before = os.getloadavg()
    out: dict = {"benchmark": "snapshots", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                       "load_before": [round(x, 2) for x in load_before]}}
    with tempfile.TemporaryDirectory(prefix="bench-snapshots-") as root, \
            Runner(Path(root), isolation="in-process") as runner:
        runner.providers[0].prepare(fuel=False)
        for name in KERNELS:
            out[name] = measure_kernel(runner, name, args.samples)
            if name in NATIVE:
                out[name]["native_cpython_os_fork_ms"] = native_fork_ms(name, args.samples * 3)
    out["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
