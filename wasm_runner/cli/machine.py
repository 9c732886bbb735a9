"""`wasm-runner prepare` and `wasm-runner doctor`: this machine's runtimes, native tools and
how worker processes are contained."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wasm_runner.runner import Runner


def prepare_command(args: argparse.Namespace) -> int:
    with Runner() as runner:
        runner.prepare()
    print("runtimes ready")
    return 0


def machine_report() -> tuple[dict[str, Any], str]:
    """What this machine offers (native tools, isolation, worker containment): the report and its text."""
    from wasm_runner.execution.containment import WorkerPolicy, detect_containment
    from wasm_runner.providers.native.doctor import doctor, format_report

    report = doctor()
    containment = detect_containment(WorkerPolicy().memory_bytes)
    report["worker_processes"] = {"containment": containment.kind, "memory_bytes": containment.memory_bytes,
                                  "detail": containment.describe()}
    mark = "ok  " if containment.kind.startswith("cgroup") else "MISS"
    text = (format_report(report) + f"\n\nworker processes (kernels, one-shot runs, batches):\n  {mark} "
            f"containment: {containment.describe()}")
    return report, text


def doctor_command(args: argparse.Namespace) -> int:
    report, text = machine_report()
    print(json.dumps(report, indent=2) if args.json else text)
    return 0 if report["ok"] else 1
