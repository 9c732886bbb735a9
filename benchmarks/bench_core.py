"""Core benchmark: prints one JSON object of medians and ratios measured in one run.

    python benchmarks/bench_core.py [--seconds 10] [--samples 200]

Fresh-instance latency for Python, JavaScript and TypeScript, kernel-turn latency, the cost of
printing line by line, a CPU-bound loop in the sandbox against native CPython (and, as
`cpu_engines`, the loop, fib and dict/string work on the epoch engine beside the epoch-free one
worker processes use, and native; `--engines-only` measures just that), fresh
Python runs per second with two worker threads, resident memory per idle kernel, and the
start-up of `wasm-runner run -c 'print(1)'` beside a plain `python -c 'print(1)'`, and what
the default isolation (guests on worker processes) adds to a fresh run and a kernel turn beside
the in-process opt-in (`--isolation-only` measures just that).
"""

from __future__ import annotations

import argparse
import compileall
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import wasm_runner
import wasm_runner_protocol
import wasm_runner_server
from wasm_runner import Limits, Runner

CPU_LOOP = "def work(n):\n    total = 0\n    for i in range(n):\n        total += i * i % 7\n    return total\nwork(3_000_000)"

CPU_WORKLOADS = {
    "loop": CPU_LOOP.replace("work(3_000_000)", "run = lambda: work(3_000_000)"),
    "fib": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nrun = lambda: fib(27)",
    "dict_str": ("def work():\n    d = {}\n    for i in range(200_000):\n        k = 'key%d' % (i % 5000)\n"
                 "        d[k] = d.get(k, '') [-20:] + str(i)\n    return len(','.join(sorted(d)))\nrun = work"),
}
"""CPU-bound guests: a plain loop, recursive calls, dict and string work. Each prints its own
duration (timed inside the guest, so start-up is not in it)."""
ENGINE_MODES = ("epoch", "epoch-free")


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": round(statistics.median(ordered), 3), "p90_ms": round(pick(0.9), 3),
            "p99_ms": round(pick(0.99), 3), "n": len(ordered)}


def time_calls(fn, samples: int, gap_s: float = 0.0) -> list[float]:
    out = []
    for _ in range(samples):
        time.sleep(gap_s)
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def fresh_latency(runner: Runner, language: str, code: str, samples: int, gap_s: float) -> dict:
    """Latency of one-shot runs arriving `gap_s` apart (0: back to back, so nothing is made ahead)."""

    def once():
        result = runner.run_sync(code, language=language)
        assert result.exit_code == 0 and result.stdout.strip() == "2", result

    for _ in range(20):
        once()
    return {**percentiles(time_calls(once, samples, gap_s)), "gap_ms": gap_s * 1000}


def kernel_turn(runner: Runner, language: str, setup: str, turn: str, samples: int, gap_s: float = 0.0) -> dict:
    """Latency of a session's turns, back to back or `gap_s` apart (as an agent's turns come; see
    `idle_cost` for what a pause costs the next work on this kind of machine)."""
    session = runner.session()
    session.run_sync(setup, language=language)
    for _ in range(20):
        session.run_sync(turn, language=language)
    result = percentiles(time_calls(lambda: session.run_sync(turn, language=language), samples, gap_s))
    session.destroy()
    return {**result, "gap_ms": gap_s * 1000} if gap_s else result


PRINTING = {"python": ("for i in range(1000):\n    print(i)", "print('\\n'.join(map(str, range(1000))))"),
            "javascript": ("for (let i = 0; i < 1000; i++) console.log(i)",
                           "console.log([...Array(1000).keys()].join('\\n'))")}


def printing(runner: Runner, language: str, samples: int = 15) -> dict:
    """A fresh run printing 1000 lines one call each, against one printing the same text at once:
    the difference is what the sandbox costs per written line."""
    lines, at_once = PRINTING[language]
    medians = {}
    for name, code in (("lines", lines), ("at_once", at_once)):
        def once(code: str = code) -> None:
            result = runner.run_sync(code, language=language)
            assert result.exit_code == 0 and result.stdout.count("\n") == 1000, result
        once()
        medians[name] = statistics.median(time_calls(once, samples))
    return {"lines_1000_ms": round(medians["lines"], 2), "at_once_ms": round(medians["at_once"], 2),
            "per_line_us": round((medians["lines"] - medians["at_once"]), 1)}


def cpu_ratio(runner: Runner, repeats: int = 5) -> dict:
    """The same loop in the sandbox (duration of the run) and in native CPython (timed in-process)."""
    timed = CPU_LOOP.replace("work(3_000_000)",
                             "t = time.perf_counter(); work(3_000_000); print((time.perf_counter() - t) * 1000)")
    sandbox, native = [], []
    for _ in range(repeats):
        result = runner.run_sync("import time\n" + timed, limits=Limits(timeout_s=120))
        assert result.error is None, result.error
        sandbox.append(float(result.stdout))
        out = subprocess.run([sys.executable, "-c", "import time\n" + timed], check=True, capture_output=True, text=True)
        native.append(float(out.stdout))
    s, n = statistics.median(sandbox), statistics.median(native)
    return {"sandbox_ms": round(s, 1), "native_ms": round(n, 1), "ratio": round(s / n, 2),
            "native_python": sys.version.split()[0], "sandbox_python": "3.14 (wasm32-wasip2, epoch deadline on)"}


def timed_workload(name: str) -> str:
    return "import time\n" + CPU_WORKLOADS[name] + "\nt = time.perf_counter(); run(); print((time.perf_counter() - t) * 1000)"


CONFIG_VARIANTS: dict[str, dict] = {
    "epoch-free opt speed_and_size": {"mode": "epoch-free", "options": {"cranelift_opt_level": "speed_and_size"}},
    "epoch-free nan canonicalization on": {"mode": "epoch-free", "options": {"cranelift_nan_canonicalization": True}},
    "epoch-free no guard (bounds checks)": {"mode": "epoch-free", "options": {"memory_guard_size": 0,
                                                                             "memory_reservation": 1 << 20}},
}
"""wasmtime `Config` settings beside the defaults (opt level `speed`, NaN canonicalization off, a
4 GiB reservation with guard pages, so bounds checks are elided): measured, each its own compile."""


def cpu_child(mode: str, options: dict[str, object]) -> None:
    """A process running the CPU workloads on demand (a workload's name on each stdin line, its
    duration in ms on stdout): in-process guests on engines with epoch interruption or
    without (as worker processes run them), and with any extra wasmtime `Config` options."""
    from wasm_runner.engine import engines

    if mode == "epoch-free":
        engines.use_epoch_free_engines()
    if options:  # a benchmark-only variant: every engine gets these options, and its own cache key
        plain_config, plain_key = engines.wasmtime.Config, engines.EngineSettings.cache_key

        def tuned_config() -> object:
            config = plain_config()
            for key, value in options.items():
                setattr(config, key, value)
            return config

        tag = "-".join(f"{k}{v}" for k, v in sorted(options.items()))
        engines.wasmtime.Config = tuned_config  # type: ignore[assignment,misc]
        engines.EngineSettings.cache_key = lambda self: f"{plain_key(self)}-{tag}"  # type: ignore[method-assign]
    with Runner(isolation="in-process", concurrency=1) as runner:
        runner.run_sync("print(1)", limits=Limits(timeout_s=600))  # compiles this variant once
        print("ready", flush=True)
        for line in sys.stdin:
            result = runner.run_sync(timed_workload(line.strip()), limits=Limits(timeout_s=120))
            assert result.error is None, result.error
            print(result.stdout.strip(), flush=True)


def engine_modes(rounds: int = 5, variants: dict[str, dict] | None = None) -> dict:
    """The CPU workloads on the epoch engine, the epoch-free one (and any `Config` variants of
    it), and native CPython, samples interleaved round by round in one run: medians, ratios and
    the machine's load."""
    variants = {"epoch": {"mode": "epoch"}, "epoch-free": {"mode": "epoch-free"}, **(variants or {})}
    load_before = os.getloadavg()
    children = {}
    for name, spec in variants.items():
        children[name] = subprocess.Popen(
            [sys.executable, __file__, "--cpu-child", spec["mode"], "--cpu-options", json.dumps(spec.get("options", {}))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for child in children.values():
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    samples: dict[str, dict[str, list[float]]] = {v: {w: [] for w in CPU_WORKLOADS} for v in [*variants, "native"]}
    for _ in range(rounds):
        for workload in CPU_WORKLOADS:
            for name, child in children.items():
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write(workload + "\n")
                child.stdin.flush()
                samples[name][workload].append(float(child.stdout.readline()))
            out = subprocess.run([sys.executable, "-c", timed_workload(workload)], check=True, capture_output=True, text=True)
            samples["native"][workload].append(float(out.stdout))
    for child in children.values():
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    medians = {v: {w: round(statistics.median(x), 1) for w, x in by.items()} for v, by in samples.items()}
    report: dict = {"median_ms": medians, "rounds": rounds,
                    "native_python": sys.version.split()[0], "sandbox_python": "3.14 (wasm32-wasip2)",
                    "variants": {name: spec for name, spec in variants.items()}}
    report["ratio_to_native"] = {v: {w: round(medians[v][w] / medians["native"][w], 2) for w in CPU_WORKLOADS}
                                 for v in variants}
    report["epoch_over_epoch_free"] = {w: round(medians["epoch"][w] / medians["epoch-free"][w], 2)
                                       for w in CPU_WORKLOADS}
    report["loadavg_before"] = [round(x, 2) for x in load_before]
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    return report


def idle_cost(samples: int = 200) -> dict:
    """What a pause costs the work after it, on this machine, with no sandbox involved: the same
    plain-Python work (a loop, and a write to each of 1,024 pages already mapped) and a thread
    pool's round trip, back to back and 20 ms apart. On a virtual machine whose idle CPU is
    given away, the work after a pause runs slower (cold caches and TLB, a wake-up): that bounds
    every figure measured "20 ms apart"."""
    import concurrent.futures

    buffer = bytearray(4 << 20)

    def work() -> None:
        for offset in range(0, len(buffer), 4096):
            buffer[offset] = 1
        sum(range(20_000))

    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.submit(int).result()
    report: dict[str, float] = {}
    for gap in (0.0, 0.02):
        name = "back_to_back" if gap == 0 else "20ms_apart"
        report[f"work_{name}_us"] = round(statistics.median(time_calls(work, samples, gap)) * 1000, 1)
        report[f"handoff_{name}_us"] = round(statistics.median(
            time_calls(lambda: pool.submit(int).result(), samples, gap)) * 1000, 1)
    pool.shutdown()
    report["work_ratio"] = round(report["work_20ms_apart_us"] / report["work_back_to_back_us"], 2)
    return report


def throughput(runner: Runner, seconds: float, threads: int = 2) -> dict:
    stop = time.monotonic() + seconds
    counts = [0] * threads
    errors = [0]

    def worker(i: int) -> None:
        while time.monotonic() < stop:
            if runner.run_sync("print(1+1)").stdout != "2\n":
                errors[0] += 1
            counts[i] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.monotonic() - started
    return {"runs_per_s": round(sum(counts) / elapsed, 1), "threads": threads, "seconds": round(elapsed, 1),
            "errors": errors[0]}


def rss_bytes() -> dict[str, int]:
    """VmRSS, and its parts: RssAnon (private) and RssFile (mapped file pages, such as the
    compiled image every kernel maps: shared with the other kernels and the page cache)."""
    sizes = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                sizes[name] = int(value.split()[0]) * 1024
    return sizes


def rss_per_kernel(runner: Runner, language: str, count: int = 20) -> dict:
    time.sleep(1.0)  # let stores closed by earlier measurements be released first
    gc.collect()
    sessions = [runner.session() for _ in range(count)]
    sessions[0].run_sync("1", language=language)
    gc.collect()
    before = rss_bytes()
    for s in sessions[1:]:
        s.run_sync("x = 1", language=language)
    gc.collect()
    time.sleep(0.2)
    after = rss_bytes()
    per = {name: (after[name] - before[name]) / (count - 1) for name in before}
    for s in sessions:
        s.destroy()
    return {"bytes_per_idle_kernel": int(per["VmRSS"]), "mib_per_idle_kernel": round(per["VmRSS"] / 2**20, 2),
            "private_mib": round(per["RssAnon"] / 2**20, 2), "mapped_file_mib": round(per["RssFile"] / 2**20, 2),
            "kernels": count - 1}


def worker_rss(runner: Runner, part: str = "VmRSS") -> int:
    """Resident bytes of the Runner's kernel worker processes (serving and spare): all of it
    (VmRSS), or its private part (RssAnon; the compiled image's file pages are shared)."""
    assert runner.kernel_workers is not None
    total = 0
    for host in runner.kernel_workers.workers:
        with open(f"/proc/{host.pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name == part:
                    total += int(value.split()[0]) * 1024
    return total


def kernels_on_workers(samples: int, count: int = 400) -> dict:
    """Kernel turns when kernels live on worker processes (`Runner(kernel_workers=2)`, as the
    service runs them), and their density: resident bytes the workers gain per idle Python
    kernel, and how many idle kernels that puts within 2 GiB."""
    with Runner(kernel_workers=2) as runner:
        assert runner.kernel_workers is not None and runner.kernel_workers.wait_ready(120)
        report = {"python_kernel_turn": kernel_turn(runner, "python", "x = 0", "x += 1", samples),
                  "javascript_kernel_turn": kernel_turn(runner, "javascript", "var x = 0", "x += 1", samples)}
        time.sleep(1.0)
        warm = [runner.session() for _ in range(2)]
        for s in warm:  # each worker has mapped the runtime once
            s.run_sync("1")
        before, before_private = worker_rss(runner), worker_rss(runner, "RssAnon")
        sessions = [runner.session() for _ in range(count)]
        for s in sessions:
            s.run_sync("x = 1")
        time.sleep(0.5)
        per_kernel = (worker_rss(runner) - before) / count
        private = (worker_rss(runner, "RssAnon") - before_private) / count
        report["python_idle_kernel_on_workers"] = {
            "kernels": count, "bytes_per_idle_kernel": int(per_kernel), "mib_per_idle_kernel": round(per_kernel / 2**20, 2),
            "private_mib_per_idle_kernel": round(private / 2**20, 2),
            "idle_kernels_within_2_gib_private": int(2 * 2**30 // private) if private > 0 else None,
            "idle_kernels_within_2_gib_rss": int(2 * 2**30 // per_kernel) if per_kernel > 0 else None,
            "workers_rss_mib": round(worker_rss(runner) / 2**20, 1),
            "workers_private_mib": round(worker_rss(runner, "RssAnon") / 2**20, 1)}
        return report


def isolation_cost(samples: int, seconds: float) -> dict:
    """What the default (`Runner()`: every guest on a supervised worker process) costs beside
    the in-process opt-in (`Runner(isolation="in-process")`), in one run: a fresh Python
    one-shot run, a Python kernel turn (both `run_sync`), fresh runs/s from two threads (in-process,
    the two share the interpreter lock; by default each run is on a worker process), and the
    machine's load around them."""
    load_before = os.getloadavg()
    report: dict = {}
    for isolation in ("in-process", "process"):
        with Runner(isolation=isolation, concurrency=2) as runner:
            runner.prepare()
            started = time.perf_counter()
            first = runner.run_sync("print(1+1)")
            assert first.stdout == "2\n", first
            first_ms = (time.perf_counter() - started) * 1000
            report[isolation] = {"first_run_ms": round(first_ms, 1),
                                 "python_fresh": fresh_latency(runner, "python", "print(1+1)", samples, 0.02),
                                 "python_fresh_back_to_back": fresh_latency(runner, "python", "print(1+1)", samples, 0),
                                 "python_kernel_turn": kernel_turn(runner, "python", "x = 0", "x += 1", samples),
                                 "python_fresh_throughput": throughput(runner, seconds)}
    added = {name: round(report["process"][name]["p50_ms"] - report["in-process"][name]["p50_ms"], 3)
             for name in ("python_fresh", "python_fresh_back_to_back", "python_kernel_turn")}
    return {**report, "added_p50_ms": added, "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()]}


def startup(runs: int = 11) -> dict:
    """Wall time of whole processes: the `wasm-runner` console running `print(1)` (as its
    executable does, without a launcher script in front), and plain Python doing the same.
    With bytecode compiled first: an install compiles it (scripts/install), and without it
    every start compiles the modules it imports."""
    for package in (wasm_runner, wasm_runner_server, wasm_runner_protocol):
        compileall.compile_dir(str(Path(str(package.__file__)).parent), quiet=1, rx=re.compile("/_runtimes/[^/]+/"))
    commands = {"run": [sys.executable, "-m", "wasm_runner_server.cli.console", "run", "-c", "print(1)"],
                "python": [sys.executable, "-c", "print(1)"]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    subprocess.run(commands["run"], check=True, capture_output=True)  # builds the runtimes if they are not yet
    for _ in range(runs):
        for name, command in commands.items():
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            times[name].append(time.perf_counter() - started)
            assert done.returncode == 0 and done.stdout == "1\n", done
    return {"startup_run_print1_s": round(statistics.median(times["run"]), 3),
            "startup_python_print1_s": round(statistics.median(times["python"]), 3),
            "startup_run_print1_min_s": round(min(times["run"]), 3), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--isolation-only", action="store_true", help="measure only the default isolation's cost")
    parser.add_argument("--engines-only", action="store_true",
                        help="measure only the CPU workloads on the epoch and epoch-free engines against native")
    parser.add_argument("--config-variants", action="store_true",
                        help="with --engines-only: also epoch-free engines with other wasmtime Config settings")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu-child", choices=ENGINE_MODES, help=argparse.SUPPRESS)
    parser.add_argument("--cpu-options", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu_child:
        cpu_child(args.cpu_child, json.loads(args.cpu_options))
        return
    report: dict = {"machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]}}
    if args.isolation_only:
        print(json.dumps({**report, "isolation": isolation_cost(args.samples, args.seconds)}, indent=2))
        return
    if args.engines_only:
        variants = CONFIG_VARIANTS if args.config_variants else None
        print(json.dumps({**report, "cpu_engines": engine_modes(args.rounds, variants)}, indent=2))
        return
    report["startup"] = startup()  # first: a Runner of this process would take CPU from the processes timed
    report["idle_cost"] = idle_cost()
    with Runner(isolation="in-process", concurrency=2) as runner:
        runner.prepare()
        report["python_fresh"] = fresh_latency(runner, "python", "print(1+1)", args.samples, 0.02)
        report["python_fresh_back_to_back"] = fresh_latency(runner, "python", "print(1+1)", args.samples, 0)
        report["javascript_fresh"] = fresh_latency(runner, "javascript", "console.log(1+1)", args.samples, 0.02)
        report["javascript_fresh_back_to_back"] = fresh_latency(runner, "javascript", "console.log(1+1)", args.samples, 0)
        # TypeScript beside JavaScript: what the in-sandbox transpile adds (bench_typescript.py has the rest).
        report["typescript_fresh"] = fresh_latency(runner, "typescript", "console.log(1+1)", args.samples, 0.02)
        report["typescript_fresh_back_to_back"] = fresh_latency(runner, "typescript", "console.log(1+1)", args.samples, 0)
        report["python_kernel_turn"] = kernel_turn(runner, "python", "x = 0", "x += 1", args.samples)
        report["python_kernel_turn_spaced"] = kernel_turn(runner, "python", "x = 0", "x += 1", args.samples, 0.02)
        report["javascript_kernel_turn"] = kernel_turn(runner, "javascript", "var x = 0", "x += 1", args.samples)
        report["python_printing"] = printing(runner, "python")
        report["javascript_printing"] = printing(runner, "javascript")
        report["cpu_loop"] = cpu_ratio(runner)
        report["python_fresh_throughput"] = throughput(runner, args.seconds)
        report["python_rss_per_kernel"] = rss_per_kernel(runner, "python")
        report["javascript_rss_per_kernel"] = rss_per_kernel(runner, "javascript")
    report["cpu_engines"] = engine_modes()  # epoch beside epoch-free (worker processes), and native
    report["kernel_workers"] = kernels_on_workers(args.samples)
    report["isolation"] = isolation_cost(args.samples, args.seconds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
