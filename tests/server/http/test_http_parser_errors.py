"""What aiohttp's parser refuses before any handler runs is answered in the service's error shape too."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import aiohttp
import pytest
from serve_in_loop import ROOT, free_port, start_serving
from server_helpers import assert_error_shape, make_config

MALFORMED = {
    "request line": (b"GARBAGE\r\n\r\n", "bad_method"),
    "method": (b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", "bad_method"),
    "version": (b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", "malformed_request"),
    "header too large": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n", "line_too_long"),
    "url too long": (b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "line_too_long"),
    "too many headers": (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200))
                         + b"\r\n", "too_many_headers"),
    "header name": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n", "malformed_request"),
    "chunk size": (b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
                   "malformed_request"),
    "content-length": (b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", "malformed_request"),
    "smuggling": (b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
                  "malformed_request"),
}


async def _exchange(port: int, *parts: bytes, pause: float = 0.0) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(pause)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        body = await asyncio.wait_for(reader.readexactly(int(headers["Content-Length"])), 10)
    finally:
        writer.close()
    return int(lines[0].split()[1]), headers, body


@pytest.fixture
async def served(tmp_path):
    config = make_config(tmp_path / "data", server={"port": free_port(), "host": "127.0.0.1"})
    task, stop, _ = await start_serving(config)
    yield config.server.port
    stop.set()
    await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_request_the_parser_refuses_gets_the_json_error_shape(served, case):
    raw, code = MALFORMED[case]
    status, headers, body = await _exchange(served, raw)
    assert status == 400
    assert headers["Content-Type"].startswith("application/json")
    data = json.loads(body)
    assert_error_shape(data, code)
    assert data["error"]["hint"]


async def test_a_bad_chunk_after_the_handler_started_is_still_the_error_shape(tmp_path):
    # aiohttp's C parser never tells the handler (the request stays unanswered; see server/http_server.py);
    # its pure-Python parser does, and the error middleware answers
    port = free_port()
    env = {**os.environ, "AIOHTTP_NO_EXTENSIONS": "1", "WASM_RUNNER_DATA_DIR": str(tmp_path / "data")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "wasm_runner_server", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-auth",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await _until_up(port)
        head = (b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        status, headers, body = await _exchange(port, head, b"1\r\n{\r\n", b"zz\r\n", pause=0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    assert_error_shape(json.loads(body), "malformed_request")


async def _until_up(port: int) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
    raise AssertionError("the server did not start")


async def test_invalid_json_is_the_error_shape(served):
    status, headers, body = await _exchange(served, b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                                    b"Content-Type: application/json\r\nContent-Length: 5\r\n\r\n{nope")
    assert status == 400
    assert_error_shape(json.loads(body), "invalid_json")
