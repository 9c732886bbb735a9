"""A real wasm-runner server on 127.0.0.1, run on its own thread so blocking clients can call it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from wasm_runner_server.app import create_app
from wasm_runner_server.config import ServiceConfig


def make_config(data_dir: Path, **sections: Any) -> ServiceConfig:
    server = {"data_dir": str(data_dir), "prepare_on_start": False, "concurrency": 2, "shutdown_timeout_s": 5}
    server.update(sections.pop("server", {}))
    sessions = {"sweep_interval_s": 0.5}
    sessions.update(sections.pop("sessions", {}))
    sections.setdefault("previews", {"port": 0})  # a free port: tests run side by side
    sections.setdefault("auth", {"enabled": False})  # API keys have their own tests (test_*_keys)
    sections.setdefault("auth", {"enabled": False})  # auth is on by default
    return ServiceConfig.model_validate({"server": server, "sessions": sessions, **sections})


class LoopbackServer:
    """The service as `wasm-runner serve` runs it, on a free port, in a background thread."""

    def __init__(self, config: ServiceConfig, record_auth: list[str | None] | None = None) -> None:
        self.config = config
        self.record_auth = record_auth
        """When given, the Authorization header of every request is appended to it."""
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="loopback-server", daemon=True)

    def start(self) -> LoopbackServer:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the server did not start within 60 s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())  # cancels what is left on the loop at the end, as `serve` does
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = create_app(self.config)
        if self.record_auth is not None:
            seen = self.record_auth

            @web.middleware
            async def record(request: web.Request, handler):
                seen.append(request.headers.get("Authorization"))
                return await handler(request)

            app.middlewares.insert(0, record)
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               handler_cancellation=True, shutdown_timeout=5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., LoopbackServer]]:
    """`start_server(record_auth=None, data_dir=None, **config_sections)` starts a server; all are stopped
    after the test."""
    servers: list[LoopbackServer] = []

    def start(record_auth: list[str | None] | None = None, data_dir: Path | None = None,
              **sections: Any) -> LoopbackServer:
        data_dir = data_dir or tmp_path / f"data{len(servers)}"
        server = LoopbackServer(make_config(data_dir, **sections), record_auth).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def server(start_server: Callable[..., LoopbackServer]) -> LoopbackServer:
    return start_server()
