"""Terminals over their WebSocket beyond a session at the keyboard: a route that is not a WebSocket
starts nothing, input a program does not read never stalls the service, a kept terminal is
reattached and replays its output from an offset, and an open terminal keeps its session awake."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, new_session
from server_helpers import assert_error_shape, eventually, link_path

from wasm_runner_server.sessions.service import SERVICE

pytestmark = NATIVE_ROOT_SERVICE


@pytest.fixture
async def secure(start_secure):
    return await start_secure(**SECTIONS)


class Terminal:
    """One terminal WebSocket: its hello, and its output read up to a marker."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.seen = b""
        self.controls: list[dict] = []

    async def hello(self) -> dict:
        message = await self.ws.receive(timeout=10)
        assert message.type == aiohttp.WSMsgType.TEXT, message
        return json.loads(message.data)

    async def read_until(self, needle: bytes, timeout: float = 10.0) -> bytes:
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            message = await self.ws.receive(timeout=max(deadline - time.monotonic(), 0.01))
            if message.type == aiohttp.WSMsgType.BINARY:
                self.seen += message.data
            elif message.type == aiohttp.WSMsgType.TEXT:
                self.controls.append(json.loads(message.data))
            else:
                raise AssertionError(f"the terminal closed before {needle!r}: {self.seen[-200:]!r}")
        return self.seen

    async def control(self, kind: str, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            found = [c for c in self.controls if c["type"] == kind]
            if found:
                return found[0]
            message = await self.ws.receive(timeout=max(deadline - time.monotonic(), 0.01))
            if message.type == aiohttp.WSMsgType.TEXT:
                self.controls.append(json.loads(message.data))
            elif message.type == aiohttp.WSMsgType.BINARY:
                self.seen += message.data
            else:
                raise AssertionError(f"the terminal closed before a {kind!r} message: {self.controls}")


async def processes(secure, sid: str) -> dict[str, dict]:
    status, listing, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes", "a_member")
    assert status == 200
    return {p["id"]: p for p in listing["processes"]}


async def test_the_terminal_route_without_a_websocket_is_refused_before_a_shell_starts(secure) -> None:
    sid = await new_session(secure)
    status, data, _ = await secure.call("GET", f"/v1/sessions/{sid}/pty?command=sleep&command=4321.5", "a_member")
    assert status == 400
    assert_error_shape(data, "validation_error")
    assert "WebSocket" in data["error"]["message"] + data["error"]["hint"]
    assert await processes(secure, sid) == {}  # nothing was started, so nothing is left running


async def test_a_flooded_terminal_stalls_neither_the_service_nor_its_own_controls(secure) -> None:
    sid = await new_session(secure)
    url = f"/v1/sessions/{sid}/pty?command=sleep&command=4321.25"
    async with secure.client.ws_connect(url, headers=secure.auth("a_member")) as ws:
        terminal = Terminal(ws)
        hello = await terminal.hello()
        # sleep never reads its terminal: once the terminal's input buffer is full, what is typed waits
        flood = b"x" * 65536
        for _ in range(40):
            await ws.send_bytes(flood)
        started = time.monotonic()
        status, _, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{hello['id']}", "a_member")
        answered_in = time.monotonic() - started
        assert status == 200
        assert answered_in < 2.0  # a write waiting on the loop would hold every request for seconds
        dropped = await terminal.control("error")
        assert "input dropped" in dropped["message"] and "INT" in dropped["message"]
        await ws.send_str(json.dumps({"type": "signal", "signal": "INT"}))  # still acts at once
        end = await terminal.control("exit")
        assert end["state"] in ("exited", "killed") and end["exit_code"] == 130


async def test_a_kept_terminal_is_reattached_and_replays_its_output_from_an_offset(secure) -> None:
    sid = await new_session(secure)
    url = f"/v1/sessions/{sid}/pty?command=bash&command=--norc&command=-i&keep=true"
    async with secure.client.ws_connect(url, headers=secure.auth("a_member")) as ws:
        first = Terminal(ws)
        pid = (await first.hello())["id"]
        await ws.send_bytes(b"echo one-$((40+2))\r")
        await first.read_until(b"one-42")
    await asyncio.sleep(SECTIONS["processes"]["pty_grace_s"] + 0.4)  # past the grace: kept all the same
    info = (await processes(secure, sid))[pid]
    assert info["state"] == "running"
    offset = info["stdout_bytes"]

    attach = f"/v1/sessions/{sid}/pty?process={pid}&cols=100&rows=30"
    async with secure.client.ws_connect(attach + "&offset=0", headers=secure.auth("a_member")) as ws:
        replay = Terminal(ws)
        assert (await replay.hello())["id"] == pid
        await replay.read_until(b"one-42")  # everything from the start, typed before the reattach
        await ws.send_bytes(b"echo two-$((2*3)); stty size\r")
        await replay.read_until(b"30 100")  # the attach's size was applied
        assert b"two-6" in replay.seen
    await asyncio.sleep(SECTIONS["processes"]["pty_grace_s"] + 0.4)  # a reattach without keep=true: still kept
    assert (await processes(secure, sid))[pid]["state"] == "running"
    async with secure.client.ws_connect(attach + f"&offset={offset}", headers=secure.auth("a_member")) as ws:
        later = Terminal(ws)
        await later.hello()
        await later.read_until(b"two-6")  # from the offset on: what came after it
        assert b"one-42" not in later.seen
        await ws.send_bytes(b"exit\r")
        assert (await later.control("exit"))["exit_code"] == 0
    status, data, _ = await secure.call("GET", attach, "a_member",
                                        headers={"Connection": "Upgrade", "Upgrade": "websocket",
                                                 "Sec-WebSocket-Version": "13",
                                                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert status == 409
    assert_error_shape(data, "process_not_running")


async def test_a_running_terminal_keeps_its_session_from_hibernating_watched_or_not(secure) -> None:
    sid = await new_session(secure, idle_timeout_s=0.3)
    sessions = secure.client.server.app[SERVICE].sessions

    async def idle_past_timeout() -> None:
        live = sessions.sessions[sid]
        live.row.last_used_at -= live.row.idle_timeout_s + 1
        await sessions.sweep()

    url = f"/v1/sessions/{sid}/pty?command=sleep&command=4321.125&keep=true"
    async with secure.client.ws_connect(url, headers=secure.auth("a_member")) as ws:
        pid = (await Terminal(ws).hello())["id"]

        async def running() -> bool:
            return (await processes(secure, sid))[pid]["state"] == "running"

        await eventually(running, timeout=10)
        await idle_past_timeout()
        assert await running()
    await idle_past_timeout()  # nobody watches the kept terminal now: it runs on, and its session is active
    assert await running()
    _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}", "a_member")
    assert info["state"] == "active"
    status, _, _ = await secure.call("DELETE", f"/v1/sessions/{sid}/processes/{pid}", "a_member")
    assert status == 200


async def test_a_terminal_link_opens_the_terminal_without_a_key_and_only_for_its_session(secure) -> None:
    sid = await new_session(secure)
    other = await new_session(secure)
    status, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/pty:presign", "a_member", json={})
    assert status == 200 and 0 < link["expires_in"] <= 61  # a minute (the expiry is a whole second)
    assert link["url"].startswith(f"ws://127.0.0.1:{secure.client.port}/v1/pty-links/")  # absolute, for a WebSocket
    assert secure.keys["a_member"] not in link["url"]
    link["url"] = link_path(link["url"])
    async with secure.client.ws_connect(link["url"] + "?command=bash&command=--norc&command=-i") as ws:  # no key
        terminal = Terminal(ws)
        pid = (await terminal.hello())["id"]
        await ws.send_bytes(b"echo $((6*7))\r")
        await terminal.read_until(b"42")
    assert (await processes(secure, sid))[pid]["argv"] == ["bash", "--norc", "-i"]
    token = link["url"].split("/")[3]
    for url in (link["url"].replace(sid, other),  # another session: the signature names this one
                link["url"].replace(token, token[:-1] + ("0" if token[-1] != "0" else "1"))):  # forged
        status, data, _ = await secure.call("GET", url)
        assert status == 403, data
        assert_error_shape(data, "link_invalid")
    assert await processes(secure, other) == {}
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/pty:presign", "a_member",
                                        json={"expires_in": 10 ** 9})
    assert status == 422
    assert_error_shape(data, "limit_exceeds_maximum")
