"""One wasm-runner service on 127.0.0.1 for the framework adapters' tests, run on a thread of its own (the
frameworks call it with blocking clients), started once per test run and stopped at its end."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web
from server_helpers import make_config

from wasm_runner_server.app import create_app


class ThreadService:
    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="integrations-service", daemon=True)

    def start(self) -> ThreadService:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the service did not start within 60 s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner = web.AppRunner(self.app, handle_signals=False, access_log=None, handler_cancellation=True,
                               shutdown_timeout=5)
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


@pytest.fixture(scope="session")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a service with the default profiles (bash, python, python-data, ...), auth off."""
    service = ThreadService(create_app(make_config(tmp_path_factory.mktemp("integrations")))).start()
    yield service.url
    service.stop()
