"""The real service in its own process, on 127.0.0.1, for tests that kill or stop it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLOW_WRITER = ("import runpy, wasm_runner_server.security.audit as audit; audit.BATCH_S = 3600; "
               "runpy.run_module('wasm_runner_server', run_name='__main__', alter_sys=True)")
"""The service with an audit writer that lets rows gather for an hour: killed, it has committed none."""


@contextlib.asynccontextmanager
async def serving(data_dir: Path, *, slow_writer: bool = False,
                  config: Path | None = None) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """The real service in its own process; yields (process, url)."""
    program = ("-c", SLOW_WRITER) if slow_writer else ("-m", "wasm_runner_server")
    extra = ("--config", str(config)) if config is not None else ()
    process = await asyncio.create_subprocess_exec(
        sys.executable, *program, "serve", "--host", "127.0.0.1", "--port", "0",
        "--data-dir", str(data_dir), "--log-level", "INFO", "--no-access-log", *extra, cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    drain = None
    assert process.stderr is not None
    stderr = process.stderr
    try:
        while True:
            raw = await asyncio.wait_for(stderr.readline(), 120)
            assert raw, "the server exited before listening"
            with contextlib.suppress(ValueError):
                entry = json.loads(raw)
                if entry.get("event") == "listening":
                    url = entry["url"]
                    break

        async def read_rest() -> None:  # a full pipe would block the server
            while await stderr.readline():
                pass

        drain = asyncio.create_task(read_rest())
        yield process, url
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        if drain is not None:
            await drain
