"""The service with the E2B API on, on 127.0.0.1 in a thread of its own (the E2B SDKs block), with keys
of two workspaces; the SDKs pointed at it through their environment variables."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from server_helpers import make_config

from wasm_runner_server.app import create_app
from wasm_runner_server.security.tenants import TenantStore


class ThreadServer:
    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="e2b-server", daemon=True)

    def start(self) -> ThreadServer:
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


@dataclass
class E2bService:
    url: str
    keys: dict[str, str]
    """alpha, alpha_2 (two keys of workspace alpha), beta (workspace beta)."""

    @property
    def api_url(self) -> str:
        return self.url + "/e2b"

    @property
    def sandbox_url(self) -> str:
        return self.url + "/e2b/sandbox"


@pytest.fixture
def start_e2b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., E2bService]]:
    """`start_e2b(**config_sections)` starts the service (auth on, E2B API on) and points the SDKs at it."""
    servers: list[ThreadServer] = []

    def start(**sections: Any) -> E2bService:
        data_dir = tmp_path / f"data{len(servers)}"
        store = TenantStore.in_data_dir(data_dir)
        keys = {name: store.create_key(workspace, name, "member")[0]
                for name, workspace in (("alpha", "alpha"), ("alpha_2", "alpha"), ("beta", "beta"))}
        store.close()
        auth = {"enabled": True, **sections.pop("auth", {})}
        e2b = {"enabled": True, **sections.pop("e2b", {})}
        config = make_config(data_dir, auth=auth, e2b=e2b, **sections)
        server = ThreadServer(create_app(config)).start()
        servers.append(server)
        service = E2bService(server.url, keys)
        # What a user of the SDKs sets: the API and one URL for every sandbox, the key, and HTTP/1.1
        # (the SDKs default to HTTP/2; aiohttp speaks HTTP/1.1).
        monkeypatch.setenv("E2B_API_URL", service.api_url)
        monkeypatch.setenv("E2B_SANDBOX_URL", service.sandbox_url)
        monkeypatch.setenv("E2B_API_KEY", keys["alpha"])
        monkeypatch.setenv("E2B_HTTP_VERSION", "1.1")
        monkeypatch.delenv("E2B_DOMAIN", raising=False)
        monkeypatch.delenv("E2B_DEBUG", raising=False)
        return service

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def e2b_service(start_e2b: Callable[..., E2bService]) -> E2bService:
    return start_e2b()
