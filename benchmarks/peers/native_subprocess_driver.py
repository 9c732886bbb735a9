"""A plain subprocess of native CPython per run: `python -c CODE` (no isolation at all)."""

from __future__ import annotations

import subprocess
import sys
import time

from _common import Adapter, NotAvailable, main


class NativeSubprocess(Adapter):
    name = "native-subprocess"

    def versions(self) -> dict[str, str]:
        return {"python": sys.version.split()[0], "executable": sys.executable}

    def fresh(self, code: str) -> str:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: {done.stderr[-300:]}")
        return done.stdout

    def session(self):
        raise NotAvailable("a plain subprocess per run keeps no state between runs")

    def cpu(self, code: str, timeout_s: float) -> tuple[float | None, float]:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        wall = (time.perf_counter() - started) * 1000
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-300:])
        return float(done.stdout), wall

    def check(self, task: dict, timeout_s: float) -> tuple[str, str]:
        """Program and tests as one `python -c`, killed at the deadline."""
        try:
            done = subprocess.run([sys.executable, "-c", task["program"] + "\n" + task["tests"]],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return "timeout", ""
        if done.returncode == 0:
            return "passed", ""
        lines = done.stderr.strip().splitlines()
        return "failed", lines[-1] if lines else f"exit {done.returncode}"


if __name__ == "__main__":
    main(NativeSubprocess)
