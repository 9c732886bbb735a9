"""wasm-runner, measured through its public API (run in this repository's interpreter)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, if not installed

from _common import Adapter, main  # noqa: E402

from wasm_runner import ExecRequest, Limits, Runner  # noqa: E402


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


class _Session:
    def __init__(self, runner: Runner) -> None:
        self.session = runner.session()

    def run(self, code: str) -> str:
        result = self.session.run_sync(code)
        if not result.ok:
            raise RuntimeError(f"turn failed: {result.error}")
        return result.stdout

    def close(self) -> None:
        self.session.destroy()


class WasmRunner(Adapter):
    name = "wasm-runner"

    def __init__(self) -> None:
        self.runner = Runner(concurrency=2)

    def versions(self) -> dict[str, str]:
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[2]).stdout.strip()
        return {"wasm-runner": _version("wasm-runner"), "commit": commit, "wasmtime": _version("wasmtime"),
                "guest": "CPython 3.14 component (componentize-py), epoch deadline on"}

    def setup(self) -> dict:
        started = time.perf_counter()
        self.runner.prepare()
        prepared = time.perf_counter()

        async def start_workers() -> None:  # run_many's worker processes start on a Runner's first batch
            async for _ in self.runner.run_many([ExecRequest(code="pass")] * 4, concurrency=2):
                pass

        asyncio.run(start_workers())
        return {"prepare_s": round(prepared - started, 2),
                "batch_workers_start_s": round(time.perf_counter() - prepared, 2)}

    def fresh(self, code: str) -> str:
        result = self.runner.run_sync(code)
        if not result.ok:
            raise RuntimeError(f"run failed: {result.error or result.limit}")
        return result.stdout

    def session(self) -> _Session:
        return _Session(self.runner)

    def cpu(self, code: str, timeout_s: float) -> tuple[float | None, float]:
        started = time.perf_counter()
        result = self.runner.run_sync(code, limits=Limits(timeout_s=timeout_s))
        wall = (time.perf_counter() - started) * 1000
        if not result.ok:
            raise RuntimeError(f"cpu loop failed: {result.error or result.limit}")
        return float(result.stdout), wall

    def check_many(self, tasks, timeout_s, workers):
        """`run_many` with the check harness: program then tests in one fresh instance each."""
        limits = Limits(timeout_s=timeout_s)
        requests = [ExecRequest(code=t["program"], harness="check", tests=t["tests"], id=t["id"], limits=limits)
                    for t in tasks]

        async def collect() -> list[tuple[str, str, str]]:
            out = []
            async for result in self.runner.run_many(requests, concurrency=workers):
                detail = "" if result.error is None else f"{result.error.type}: {result.error.message}"
                out.append((result.id, result.verdict or "none", detail))
            return out

        return iter(asyncio.run(collect()))

    def close(self) -> None:
        self.runner.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main(WasmRunner)
