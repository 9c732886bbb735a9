"""Terminals: a WebSocket carrying a shell (or a given command) on a pseudo-terminal inside the sandbox.

    GET /v1/sessions/{id}/pty?cols=80&rows=24[&command=bash&command=-l][&keep=true][&process=p3][&offset=N]

Framing: a *binary* frame carries terminal bytes (client -> server: keystrokes; server ->
client: the terminal's output); a *text* frame carries one JSON control message:
    client -> server  {"type": "resize", "cols": 120, "rows": 40}
                      {"type": "signal", "signal": "INT"}
                      {"type": "input", "data": "ls\\r"}      (for clients without binary frames)
    server -> client  {"type": "process", "id": "p3", ...}   (first: the process it is attached to)
                      {"type": "exit", "exit_code": 0, "state": "exited"}   (then the socket closes)
The terminal is a background process of the session (same confinement, same caps). When the
socket closes the shell is ended after `[processes] pty_grace_s`, unless `keep=true` (it keeps
running, listed among the processes) or another socket attached (`process=p3`) in the meantime;
an attach replays the output the ring still holds from `offset` (default: all of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import msgspec
from aiohttp import web

from wasm_runner.processes import BackgroundProcess, ProcessError
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.processes import ProcessStart, PtyInput, PtyResize, PtySignal
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.sessions.processes import ring_wakeups
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()

DEFAULT_SHELL = ["bash", "-l"]
_control = msgspec.json.Decoder(PtyResize | PtySignal | PtyInput)


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise ApiError(422, ErrorCode.INVALID_QUERY, f"{name} must be an integer in {low}..{high}")
    return int(text)


@routes.get("/v1/sessions/{id}/pty")
async def terminal(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    cols, rows = _int(request, "cols", 80, 1, 1000), _int(request, "rows", 24, 1, 1000)
    offset = _int(request, "offset", 0, 0, 1 << 62)
    keep = request.query.get("keep", "false").lower() in ("1", "true", "yes")
    attach = request.query.get("process")
    if attach is not None:
        process = service.processes.get(live, attach)
        if not process.pty:
            raise ApiError(409, ErrorCode.PROCESS_NOT_RUNNING, f"process {attach} has no terminal",
                           "open a new terminal without process=")
        if not process.running:
            raise ApiError(409, ErrorCode.PROCESS_NOT_RUNNING, f"process {attach} is {process.state}",
                           "open a new terminal without process=")
    else:
        command = request.query.getall("command", []) or DEFAULT_SHELL
        body = ProcessStart(command=list(command), pty=True, cols=cols, rows=rows, name="terminal")
        process = await service.processes.start(live, body, principal_of(request))
    ws = web.WebSocketResponse(heartbeat=30, max_msg_size=1 << 20)
    await ws.prepare(request)
    await ws.send_str(json.dumps({"type": "process", "id": process.id, "pid": process.info().pid}))
    if attach is not None:
        process.resize(cols, rows)
    process.attached += 1
    pump = asyncio.ensure_future(_output(ws, process, offset))
    try:
        async for message in ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                await _write(process, message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                await _handle_control(ws, process, message.data)
            else:
                break
            service.sessions.touch(live)
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
        process.attached -= 1
        if not process.attached:
            if not keep and process.running:
                grace = service.config.processes.pty_grace_s
                asyncio.get_running_loop().call_later(grace, _end_unless_attached, process)
    return ws


def _end_unless_attached(process: BackgroundProcess) -> None:
    if not process.attached and process.running:
        asyncio.ensure_future(asyncio.to_thread(process.kill, 1.0, "stopped: its terminal was closed"))


async def _write(process: BackgroundProcess, data: bytes) -> None:
    try:
        process.write(data)
    except ProcessError:
        pass  # it ended: the output pump says so and closes the socket


async def _handle_control(ws: web.WebSocketResponse, process: BackgroundProcess, text: str) -> None:
    try:
        control = _control.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        await ws.send_str(json.dumps({"type": "error", "message": f"invalid control message: {exc}"}))
        return
    if isinstance(control, PtyResize):
        process.resize(control.cols, control.rows)
    elif isinstance(control, PtySignal):
        await asyncio.to_thread(process.signal, control.signal)
    elif isinstance(control, PtyInput):
        await _write(process, control.data.encode())


async def _output(ws: web.WebSocketResponse, process: BackgroundProcess, offset: int) -> None:
    """Terminal output to the socket as binary frames, from `offset`; then the exit message."""
    ring = process.stdout
    try:
        with ring_wakeups(ring) as event:
            while True:
                event.clear()
                closed = ring.closed
                chunk = ring.read(offset)
                if chunk.data:
                    await ws.send_bytes(chunk.data)
                    offset = chunk.next_offset
                    continue
                if closed:
                    await ws.send_str(json.dumps({"type": "exit", "exit_code": process.exit_code, "state": process.state}))
                    await ws.close()
                    return
                await event.wait()
    except ConnectionResetError:
        return
