"""Helpers shared by the HTTP tests (a real server on 127.0.0.1 per test)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from yarl import URL

from wasm_runner_server.config import ServiceConfig


def make_config(data_dir: Path, **sections: Any) -> ServiceConfig:
    """Test defaults: no warm-up wait, a fast sweep; any config section may be overridden."""
    server = {"data_dir": str(data_dir), "prepare_on_start": False, "concurrency": 2, "shutdown_timeout_s": 5}
    server.update(sections.pop("server", {}))
    sessions = {"sweep_interval_s": 0.1}
    sessions.update(sections.pop("sessions", {}))
    sections.setdefault("previews", {"port": 0})  # a free port: tests run side by side
    sections.setdefault("auth", {"enabled": False})  # these tests are about the API, not keys
    sections["auth"] = {"first_run_key": False, **sections["auth"]}  # only the first-run tests turn it on
    return ServiceConfig.model_validate({"server": server, "sessions": sessions, **sections})


async def body(response: ClientResponse) -> Any:
    text = await response.text()
    return json.loads(text) if text else None


def link_path(url: str) -> str:
    """The path (and query) of a link the service handed out: links are absolute, on the address the
    caller used (a test server's `http://127.0.0.1:{port}`); a test client takes paths."""
    parsed = URL(url, encoded=True)
    if not parsed.absolute:
        return url
    assert parsed.scheme in ("http", "https", "ws", "wss") and parsed.host == "127.0.0.1", url
    return parsed.raw_path_qs


async def call(client: TestClient, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with client.request(method, link_path(path), **kwargs) as response:
        return response.status, await body(response)


async def new_session(client: TestClient, **fields: Any) -> str:
    status, data = await call(client, "POST", "/v1/sessions", json=fields)
    assert status == 201, data
    return data["id"]


async def run(client: TestClient, session_id: str, code: str, **fields: Any) -> dict:
    status, data = await call(client, "POST", f"/v1/sessions/{session_id}/exec", json={"code": code, **fields})
    assert status == 200, data
    return data


def raw_url(client: TestClient, raw_path: str) -> URL:
    """A URL sent exactly as written (no client-side normalisation of '..' or escapes)."""
    return URL(str(client.make_url("")).rstrip("/") + raw_path, encoded=True)


def assert_error_shape(data: Any, code: str | None = None) -> None:
    assert isinstance(data, dict) and set(data) == {"error"}, data
    error = data["error"]
    assert set(error) == {"code", "message", "hint"}, error
    assert isinstance(error["code"], str) and isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code, error


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)
