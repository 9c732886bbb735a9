"""What every peer driver shares: the measurements, bounded by samples and time.

A driver runs in its peer's own interpreter (a venv for the packaged peers), so this module
uses the standard library only. A driver defines an adapter (see `Adapter`) and calls
`main(adapter_factory)`; it is run as

    PYTHON benchmarks/peers/<peer>_driver.py --config CONFIG.json --out RESULT.json

and writes one JSON object to RESULT.json (never stdout: some peers log there).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

FRESH_CODE = "print(1+1)"
SESSION_SETUP = "x = 0"
SESSION_TURN = "x += 1"
CPU_CODE = """import time
def work(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total
started = time.perf_counter()
work(3_000_000)
print(round((time.perf_counter() - started) * 1000, 3))
"""
"""The same CPU-bound loop everywhere (bench_core.py's); it prints its own duration in ms."""


class NotAvailable(Exception):
    """The peer has no such mode; the message says why (reported as n/a)."""


class Adapter:
    """One system under test. Override what the peer supports; the rest is n/a."""

    name = "?"

    def versions(self) -> dict[str, str]:
        return {}

    def fresh(self, code: str) -> str | None:
        """Run `code` in a fresh instance; its stdout, or None where stdout is not observable."""
        raise NotAvailable("no fresh-run mode")

    def session(self) -> Any:
        """An object with run(code) -> stdout and close(); raise NotAvailable if none."""
        raise NotAvailable("no session mode")

    def cpu(self, code: str, timeout_s: float) -> tuple[float | None, float]:
        """(duration printed by the guest or None, wall ms of the whole call)."""
        started = time.perf_counter()
        out = self.fresh(code)
        wall = (time.perf_counter() - started) * 1000
        return (float(out) if out else None), wall

    def check(self, task: dict, timeout_s: float) -> tuple[str, str]:
        """(verdict, detail) for one task: passed / failed / timeout / error / limit."""
        raise NotAvailable("no check mode")

    def check_many(self, tasks: list[dict], timeout_s: float, workers: int) -> Iterator[tuple[str, str, str]]:
        """(id, verdict, detail) in completion order; by default a thread pool of `workers`."""
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(self._safe_check, t, timeout_s): t["id"] for t in tasks}
            for future in concurrent.futures.as_completed(futures):
                verdict, detail = future.result()
                yield futures[future], verdict, detail

    def _safe_check(self, task: dict, timeout_s: float) -> tuple[str, str]:
        try:
            return self.check(task, timeout_s)
        except NotAvailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a harness failure is a verdict too
            return "harness-error", f"{type(exc).__name__}: {exc}"[:300]

    def setup(self) -> dict:
        """One-off work (compiling, caching) before measuring; returns facts worth reporting."""
        return {}

    def close(self) -> None:
        pass


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": round(statistics.median(ordered), 3), "p90_ms": round(pick(0.9), 3),
            "min_ms": round(ordered[0], 3), "n": len(ordered)}


def bounded_samples(fn: Callable[[], None], samples: int, max_s: float, warmup: int = 0) -> list[float]:
    """Time `fn` up to `samples` times, stopping early once `max_s` has passed (at least one)."""
    for _ in range(warmup):
        fn()
    out: list[float] = []
    deadline = time.monotonic() + max_s
    while len(out) < samples and (not out or time.monotonic() < deadline):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def fresh_latency(adapter: Adapter, cfg: dict) -> dict:
    def once() -> None:
        out = adapter.fresh(FRESH_CODE)
        if out is not None and out.strip() != "2":
            raise RuntimeError(f"unexpected output {out!r}")

    samples = bounded_samples(once, cfg["samples"], cfg["max_s"], cfg.get("warmup", 0))
    return {**percentiles(samples), "code": FRESH_CODE, "back_to_back": True}


def session_turn(adapter: Adapter, cfg: dict) -> dict:
    session = adapter.session()
    try:
        session.run(SESSION_SETUP)
        turns = [0]

        def once() -> None:
            session.run(SESSION_TURN)
            turns[0] += 1

        samples = bounded_samples(once, cfg["samples"], cfg["max_s"], cfg.get("warmup", 0))
        final = (session.run("print(x)") or "").strip()
        kept = final == str(turns[0])
    finally:
        session.close()
    return {**percentiles(samples), "turn": SESSION_TURN, "state_kept": kept}


def throughput(adapter: Adapter, cfg: dict) -> dict:
    """Fresh runs by `workers` threads for about `seconds` (a run in flight at the end finishes)."""
    workers, seconds = cfg.get("workers", 2), cfg["seconds"]
    stop = time.monotonic() + seconds
    counts, errors = [0] * workers, [0] * workers
    failures: list[str] = []

    def worker(i: int) -> None:
        while time.monotonic() < stop:
            try:
                out = adapter.fresh(FRESH_CODE)
                if out is not None and out.strip() != "2":
                    raise RuntimeError(f"unexpected output {out!r}")
                counts[i] += 1
            except Exception as exc:  # noqa: BLE001
                errors[i] += 1
                failures.append(repr(exc)[:200])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    return {"runs_per_s": round(sum(counts) / elapsed, 3), "runs": sum(counts), "workers": workers,
            "seconds": round(elapsed, 2), "errors": sum(errors), "first_error": failures[:1]}


def cpu_loop(adapter: Adapter, cfg: dict) -> dict:
    guest, wall = [], []
    for _ in range(cfg["repeats"]):
        g, w = adapter.cpu(CPU_CODE, cfg.get("timeout_s", 300))
        wall.append(w)
        if g is not None:
            guest.append(g)
    return {"in_guest_ms": round(statistics.median(guest), 1) if guest else None,
            "wall_ms": round(statistics.median(wall), 1), "repeats": cfg["repeats"],
            "loop": "work(3_000_000)"}


def checks(adapter: Adapter, cfg: dict) -> dict:
    """Run the tasks `rounds` times with `workers` in parallel, and again while the passes
    together took less than `min_s` (a pass of a fast system lasts a fraction of a second,
    which a burst of load on a shared machine can fill): checks/s is the checks of all passes
    over their time. Verdicts against expected."""
    tasks: list[dict] = cfg["tasks"]
    expected = {t["id"]: t["expected"] for t in tasks}
    walls: list[float] = []
    verdicts: dict[str, str] = {}
    details: dict[str, str] = {}
    wrong = 0
    while len(walls) < cfg.get("rounds", 1) or sum(walls) < cfg.get("min_s", 0.0):
        started = time.perf_counter()
        got = {}
        for task_id, verdict, detail in adapter.check_many(tasks, cfg["timeout_s"], cfg.get("workers", 2)):
            got[task_id] = verdict
            details[task_id] = detail
        wall = time.perf_counter() - started
        if len(got) != len(tasks):
            raise RuntimeError(f"{len(got)} results for {len(tasks)} tasks")
        wrong += sum(got[i] != expected[i] for i in expected)
        walls.append(wall)
        verdicts = got
    mismatched = sorted(i for i in expected if verdicts[i] != expected[i])
    return {
        "checks_per_s": round(len(tasks) * len(walls) / sum(walls), 2),
        "checks": len(tasks), "rounds": len(walls), "wall_s": [round(w, 3) for w in walls],
        "workers": cfg.get("workers", 2), "timeout_s": cfg["timeout_s"],
        "verdicts": dict(Counter(verdicts.values())),
        "expected": dict(Counter(expected.values())),
        "verdicts_matching": round(1 - wrong / (len(tasks) * len(walls)), 4),
        "mismatches": [{"id": i, "expected": expected[i], "got": verdicts[i], "detail": details.get(i, "")[:200]}
                       for i in mismatched[:5]],
    }


MEASUREMENTS: dict[str, Callable[[Adapter, dict], dict]] = {
    "fresh_latency": fresh_latency,
    "session_turn": session_turn,
    "throughput": throughput,
    "cpu_loop": cpu_loop,
    "checks": checks,
    "checks_no_timeouts": checks,
    "timeout_check": checks,
}


def run_all(adapter: Adapter, config: dict) -> dict:
    report: dict[str, Any] = {"system": adapter.name, "python": sys.version.split()[0],
                              "executable": sys.executable, "pid": os.getpid()}
    try:
        report["versions"] = adapter.versions()
    except Exception as exc:  # noqa: BLE001
        report["versions"] = {"error": repr(exc)}
    started = time.perf_counter()
    report["setup"] = adapter.setup()
    report["setup"]["seconds"] = round(time.perf_counter() - started, 2)
    for name, cfg in config.get("measurements", {}).items():
        began = time.perf_counter()
        try:
            report[name] = MEASUREMENTS[name](adapter, cfg)
        except NotAvailable as exc:
            report[name] = {"na": str(exc)}
        except Exception as exc:  # noqa: BLE001 - report, keep measuring the rest
            report[name] = {"error": f"{type(exc).__name__}: {exc}"[:500],
                            "traceback": traceback.format_exc()[-1500:]}
        if isinstance(report[name], dict):
            report[name]["measured_s"] = round(time.perf_counter() - began, 2)
        print(f"[{adapter.name}] {name}: {json.dumps(report[name])[:300]}", file=sys.stderr, flush=True)
    adapter.close()
    return report


def main(factory: Callable[[], Adapter]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True, help="JSON file: {'measurements': {name: cfg}}")
    parser.add_argument("--out", required=True, help="where the JSON result goes")
    args = parser.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    report = run_all(factory(), config)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    sys.stderr.flush()
    os._exit(0)  # do not wait for a peer's leftover threads

