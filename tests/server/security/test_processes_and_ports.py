"""Background processes, preview ports and terminals over HTTP, on a server with keys.

Each server runs its sandboxes natively (bubblewrap); the dev server inside them is a small
stdlib program (helpers/sandbox_devserver.py) or `python3 -m http.server`."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from host_processes import host_processes_running
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, devserver, listening, new_session, preview_of, start, until_gone
from server_helpers import assert_error_shape, eventually

from wasm_runner_server.security.audit import AuditFilter
from wasm_runner_server.security.state import SECURITY

pytestmark = NATIVE_ROOT_SERVICE


async def test_http_server_through_a_preview_link_on_its_own_origin(secure) -> None:
    sid = await new_session(secure)
    preview = await preview_of(secure, sid, 8000)
    async with aiohttp.ClientSession() as http:
        async with http.get(preview.base + "/", headers=preview.headers()) as response:
            data = await response.json()
            assert response.status == 502
    assert_error_shape(data, "port_not_listening")
    assert "POST /v1/sessions/{id}/processes" in data["error"]["hint"]
    status, _, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/site/index.html", "a_member", data="<h1>hi</h1>")
    info = await start(secure, sid, command=["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], cwd="site")
    await listening(secure, sid, info["id"], 8000)
    async with aiohttp.ClientSession() as http:  # a browser tab: no key
        for _ in range(2):
            async with http.get(preview.base + "/index.html", headers=preview.headers()) as response:
                assert response.status == 200 and await response.text() == "<h1>hi</h1>"
        other_port = preview.host.replace("8000-", "8001-", 1)  # the address is scoped to its port
        async with http.get(preview.base + "/index.html", headers={"Host": other_port}) as response:
            assert response.status == 404
            assert_error_shape(await response.json(), "preview_not_found")
        label = preview.host.split(".", 1)[0]
        forged = preview.host.replace(label, label[:-1] + ("a" if label[-1] != "a" else "b"), 1)
        async with http.get(preview.base + "/index.html", headers={"Host": forged}) as response:
            assert response.status == 404
    status, _, _ = await secure.call("GET", f"/v1/sessions/{sid}/ports/8000/index.html")  # no key
    assert status == 401
    status, _, _ = await secure.call("GET", f"/v1/sessions/{sid}/ports/8000/index.html", "b_member")  # not theirs
    assert status == 404
    # its log, read by offset across a "reconnect": no byte lost or repeated
    path = f"/v1/sessions/{sid}/processes/{info['id']}/output?stream=stderr"

    async def both_logged() -> bool:  # the server logs a request after answering it
        _, whole, _ = await secure.call("GET", path, "a_member")
        return whole["data"].count('"GET /index.html HTTP/1.1" 200') == 2

    await eventually(both_logged, timeout=5)
    _, first, _ = await secure.call("GET", path + "&offset=0&limit=20", "a_member")
    _, rest, _ = await secure.call("GET", path + f"&offset={first['next_offset']}", "a_member")
    log = first["data"] + rest["data"]
    assert first["offset"] == 0 and len(first["data"]) == 20 and rest["offset"] == 20
    assert log.count('"GET /index.html HTTP/1.1" 200') == 2


async def test_the_egress_relay_of_a_networked_session_is_neither_listed_nor_reachable_as_a_preview(start_secure):
    net = {"language": "bash", "provider": "native", "network": {"mode": "allowlist", "allow": ["127.0.0.1:9"]}}
    secure = await start_secure(profiles={"net": net}, **SECTIONS)
    sid = await new_session(secure, profile="net")
    info = await start(secure, sid, command=["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"])
    await listening(secure, sid, info["id"], 8000)
    _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{info['id']}", "a_member")
    assert info["ports"] == [8000]  # the relay to the host's egress proxy listens too, on 3128
    preview = await preview_of(secure, sid, 3128)  # a preview of it would hand out the session's network
    async with aiohttp.ClientSession() as http, http.get(preview.base + "/", headers=preview.headers()) as response:
        assert response.status == 502
        assert_error_shape(await response.json(), "port_not_listening")


async def test_streaming_keepalive_redirects_and_a_websocket_echo_inside_the_sandbox(secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    preview = await preview_of(secure, sid, 8080)
    base, auth = preview.base, preview.headers()
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/chunked", headers=auth) as response:
            assert response.status == 200 and response.headers.get("Transfer-Encoding") == "chunked"
            assert await response.text() == "one two three"
        async with http.get(base + "/", headers={**auth, **secure.auth("a_member")}) as response:
            # the key never reaches the sandbox (nor is it needed)
            assert response.status == 200 and (await response.text()).startswith("hello from the sandbox; auth=None")

        async def chunks():
            for part in (b"abc", b"def"):
                yield part

        async with http.post(base + "/echo", headers=auth, data=chunks()) as response:  # chunked upload
            assert response.status == 200 and await response.read() == b"abcdef"
        async with http.get(base + "/redirect", headers=auth, allow_redirects=False) as response:
            assert response.status == 302 and response.headers["Location"] == "/chunked"  # root paths are its own
        async with http.ws_connect(base + "/ws", headers=auth) as ws:
            await ws.send_str("ping")
            assert (await ws.receive(timeout=5)).data == "echo: ping"
            await ws.send_bytes(b"\x00\x01")
            assert (await ws.receive(timeout=5)).data == b"\x00\x01"


async def test_stdin_signals_the_process_cap_and_sse_resuming_by_offset(secure) -> None:
    sid = await new_session(secure)
    code = "import sys, signal\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\n"
    info = await start(secure, sid, code=code, language="python")
    pid = info["id"]
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/processes/{pid}/stdin", "a_member",
                                        json={"data": "one\n"})
    assert status == 200 and data == {"written": 4}
    sse = {"Accept": "text/event-stream", **secure.auth("a_member")}
    output = f"/v1/sessions/{sid}/processes/{pid}/output"
    async with secure.client.get(output + "?offset=0", headers=sse) as response:
        line = b""
        while b"\n\n" not in line:
            line += await response.content.readany()
    event = line.decode().split("\n\n")[0].splitlines()
    assert event[1] == "event: output"
    first = json.loads(event[2].removeprefix("data: "))
    assert first["data"] == "got one\n" and event[0] == "id: 8"
    await secure.call("POST", f"/v1/sessions/{sid}/processes/{pid}/stdin", "a_member", json={"data": "two\n", "eof": True})
    async with secure.client.get(output, headers={**sse, "Last-Event-ID": "8"}) as response:  # a reconnect
        body = (await response.read()).decode()
    assert '"data": "got two\\n"' in body and "got one" not in body and "event: exit" in body
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/processes/{pid}/stdin", "a_member",
                                        json={"data": "late"})
    assert status == 409
    assert_error_shape(data, "process_not_running")
    # the cap (3 here) refuses the next start with a clear error
    live = [await start(secure, sid, command=["sleep", "60"]) for _ in range(3)]
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/processes", "a_member",
                                        json={"command": ["sleep", "60"]})
    assert status == 409
    assert_error_shape(data, "process_limit")
    assert "3 live processes" in data["error"]["message"]
    status, data, _ = await secure.call("POST", f"/v1/sessions/{sid}/processes/{live[0]['id']}/signal", "a_member",
                                        json={"signal": "KILL"})
    assert status == 200
    status, data, _ = await secure.call("DELETE", f"/v1/sessions/{sid}/processes/{live[1]['id']}", "a_member")
    assert status == 200 and data["state"] == "killed"
    _, listing, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes", "a_member")
    assert listing["live"] == 1 and listing["max_live"] == 3
    _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}", "a_member")
    assert info["state"] == "active" and info["kernels"] == []  # a running process is use, not a hibernated session
    status, data, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/p99", "a_member")
    assert status == 404
    assert_error_shape(data, "process_not_found")
    # the audit log has each start and end, with exit code and duration
    audit = secure.client.server.app[SECURITY].audit
    await eventually(lambda: asyncio.sleep(0, len(audit.query(AuditFilter(kind="process"))) >= 7))
    rows = audit.query(AuditFilter(kind="process"), limit=100)
    ended = [r for r in rows if r["mode"] == "exit" and r["path"] == pid]
    assert ended and ended[0]["exit_code"] == 0 and ended[0]["duration_ms"] > 0 and ended[0]["workspace"] == "alpha"
    assert {r["mode"] for r in rows} == {"start", "exit"}
    status, metrics, _ = await secure.call("GET", "/metrics", "admin")
    assert "wasm_runner_processes_live 1" in metrics


async def test_a_terminal_runs_bash_answers_resizes_and_exits(secure) -> None:
    sid = await new_session(secure)
    async with secure.client.ws_connect(f"/v1/sessions/{sid}/pty?cols=80&rows=24&command=bash&command=--norc",
                                        headers=secure.auth("a_member")) as ws:
        hello = json.loads((await ws.receive(timeout=5)).data)
        assert hello["type"] == "process" and hello["id"].startswith("p")
        seen = b""

        async def read_until(needle: bytes) -> None:
            nonlocal seen
            while needle not in seen:
                message = await ws.receive(timeout=10)
                assert message.type == aiohttp.WSMsgType.BINARY, (message, seen)
                seen += message.data

        async def prompt() -> None:  # the shell reads its next line (as a person waits to type it)
            nonlocal seen
            while not seen.endswith((b"$ ", b"# ")):
                message = await ws.receive(timeout=10)
                assert message.type == aiohttp.WSMsgType.BINARY, (message, seen)
                seen += message.data

        await prompt()
        await ws.send_bytes(b"echo $((6*7))\r")
        await read_until(b"42")
        await prompt()
        await ws.send_str(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
        await ws.send_bytes(b"stty size\r")
        await read_until(b"43 132")
        await ws.send_bytes(b"exit\r")
        while True:
            message = await ws.receive(timeout=10)
            if message.type == aiohttp.WSMsgType.TEXT:
                assert json.loads(message.data) == {"type": "exit", "exit_code": 0, "state": "exited"}
                break
            assert message.type == aiohttp.WSMsgType.BINARY


async def test_a_closed_terminal_ends_after_its_grace_unless_kept(secure) -> None:
    sid = await new_session(secure)
    url = f"/v1/sessions/{sid}/pty?command=sleep&command=4321.5"
    async with secure.client.ws_connect(url, headers=secure.auth("a_member")) as ws:
        await ws.receive(timeout=5)
    async with secure.client.ws_connect(url + "&keep=true", headers=secure.auth("a_member")) as ws:
        kept = json.loads((await ws.receive(timeout=5)).data)["id"]
    deadline = asyncio.get_running_loop().time() + 10  # the grace, then TERM (KILL after its own grace)
    while True:
        _, listing, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes", "a_member")
        states = {p["id"]: p["state"] for p in listing["processes"]}
        settled = list(states.values()).count("killed") == 1 and states[kept] != "starting"
        if settled or asyncio.get_running_loop().time() > deadline:  # a kept sandbox may still be setting up
            break
        await asyncio.sleep(0.1)
    assert states[kept] == "running" and list(states.values()).count("killed") == 1, states


async def test_deleting_the_session_and_shutting_the_server_down_leave_no_process(start_secure) -> None:
    secure = await start_secure(**SECTIONS)
    marker = "4321.75"
    sid = await new_session(secure)
    await start(secure, sid, command=["bash", "-c", f"sleep {marker} & sleep {marker}"])
    await start(secure, sid, command=["sleep", marker])
    other = await new_session(secure)
    await start(secure, other, command=["sleep", marker])
    deadline = time.monotonic() + 5
    while len(host_processes_running(["sleep", marker])) < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(host_processes_running(["sleep", marker])) == 4
    status, _, _ = await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member")
    assert status == 204
    deadline = time.monotonic() + 5
    while len(host_processes_running(["sleep", marker])) > 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(host_processes_running(["sleep", marker])) == 1  # the other session's is untouched
    await secure.client.close()  # the server shuts down
    await until_gone(marker)


@pytest.fixture
async def secure(start_secure):
    return await start_secure(**SECTIONS)
