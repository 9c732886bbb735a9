"""What the preview proxy guarantees beyond reaching the server: kept-alive connections into the
sandbox, bodies streamed as they come, a body cut short never passed off as whole, and a port
whose listener changed found again."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, devserver, listening, new_session, preview_of, start
from server_helpers import eventually

pytestmark = NATIVE_ROOT_SERVICE


@pytest.fixture
async def secure(start_secure):
    return await start_secure(**SECTIONS)


async def test_requests_over_one_client_connection_reuse_one_connection_into_the_sandbox(secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    preview = await preview_of(secure, sid, 8080)
    base = preview.base
    connector = aiohttp.TCPConnector(limit=1)  # one connection from this client to the service
    async with aiohttp.ClientSession(connector=connector, headers=preview.headers()) as http:
        for _ in range(5):
            async with http.get(base + "/") as response:
                assert response.status == 200 and (await response.text()).startswith("hello from the sandbox")
        async with http.get(base + "/chunked") as response:
            assert await response.text() == "one two three"
        async with http.get(base + "/connections") as response:
            assert await response.text() == "1"  # the dev server accepted one connection for all seven


async def test_a_body_streams_through_as_it_comes_before_the_server_finished(secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    preview = await preview_of(secure, sid, 8080)
    async with aiohttp.ClientSession(headers=preview.headers()) as http:
        async with http.get(preview.base + "/hold") as response:
            assert response.status == 200
            # the dev server holds its last chunk until /release: only a streaming proxy delivers the first now
            first = await asyncio.wait_for(response.content.readany(), 5)
            assert first == b"first "
            async with http.get(preview.base + "/release") as released:
                assert released.status == 200
            assert await asyncio.wait_for(response.content.read(), 5) == b"last"


async def test_a_body_the_server_cuts_short_ends_short_and_the_proxy_serves_on(secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    preview = await preview_of(secure, sid, 8080)
    received = b""
    async with aiohttp.ClientSession(headers=preview.headers()) as http:
        async with http.get(preview.base + "/cut") as response:
            assert response.status == 200 and response.headers["Content-Length"] == "100"
            with pytest.raises(aiohttp.ClientPayloadError):
                while chunk := await response.content.readany():
                    received += chunk
        assert received == b"0123456789"  # what the server sent, and nothing else in its place
        async with http.get(preview.base + "/") as response:
            assert response.status == 200 and (await response.text()).startswith("hello from the sandbox")


async def test_a_port_that_another_process_listens_on_now_is_found_again(secure) -> None:
    sid = await new_session(secure)
    for name in ("a", "b"):
        await secure.call("PUT", f"/v1/sessions/{sid}/files/{name}/{name}.txt", "a_member", data=name)
    preview = await preview_of(secure, sid, 8080)

    async def page(path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession(headers=preview.headers()) as http, http.get(preview.base + path) as response:
            return response.status, await response.text()

    # the first process stops listening but keeps running: the proxy's remembered listener is stale
    first = await start(secure, sid, cwd="a", command=[
        "bash", "-c", "timeout 1.5 python3 -m http.server 8080 --bind 127.0.0.1; exec sleep 600"])
    await listening(secure, sid, first["id"], 8080)
    assert await page("/a.txt") == (200, "a")

    async def stopped_listening() -> bool:
        _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{first['id']}", "a_member")
        assert info["state"] == "running"
        return 8080 not in info.get("ports", [])

    await eventually(stopped_listening, timeout=10, interval=0.05)
    second = await start(secure, sid, cwd="b", command=["python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"])
    await listening(secure, sid, second["id"], 8080)
    assert await page("/b.txt") == (200, "b")
