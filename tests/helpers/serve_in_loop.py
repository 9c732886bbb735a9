"""The service started by `serve()` on the test's own event loop, on a free loopback port."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp

from wasm_runner_server.cli.serve import serve

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_serving(config) -> tuple[asyncio.Task, asyncio.Event, str]:
    """The serving task, the event that stops it, and its URL, once /healthz answers."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop=stop))
    url = f"http://127.0.0.1:{config.server.port}"
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(url + "/healthz") as response:
                    if response.status == 200:
                        return task, stop, url
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.02)
    raise AssertionError("the server did not start")
