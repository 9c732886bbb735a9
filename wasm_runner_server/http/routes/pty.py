"""Terminals: a WebSocket carrying a shell (or a given command) on a pseudo-terminal inside the sandbox.

    GET /v1/sessions/{id}/pty?cols=80&rows=24[&command=bash&command=-l][&keep=true][&process=p3][&offset=N]

Framing: a *binary* frame carries terminal bytes (client -> server: keystrokes; server ->
client: the terminal's output); a *text* frame carries one JSON control message:
    client -> server  {"type": "resize", "cols": 120, "rows": 40}
                      {"type": "signal", "signal": "INT"}
                      {"type": "input", "data": "ls\\r"}      (for clients without binary frames)
    server -> client  {"type": "process", "id": "p3", ...}   (first: the process it is attached to)
                      {"type": "error", "message": "..."}     (a control message refused, input dropped)
                      {"type": "exit", "exit_code": 0, "state": "exited"}   (then the socket closes)
The terminal is a background process of the session (same confinement, same caps). When the
socket closes the shell is ended after `[processes] pty_grace_s`, unless it was opened (or once
reattached) with `keep=true` (it keeps running, listed among the processes) or another socket
attached (`process=p3`) in the meantime;
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
from wasm_runner.providers.native.sandboxed_process import MAIN_NS_PID
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.processes import ProcessStart, PtyInput, PtyResize, PtySignal, TerminalQuery
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.sessions.processes import ring_wakeups
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()

DEFAULT_SHELL = ["bash", "-l"]
PENDING_MAX = 1 << 20
"""Input bytes waiting for a terminal's program to read them; more is dropped (and the client told)."""
WRITE_CHUNK = 1 << 16
WRITE_RETRY_S = 0.005
WRITE_RETRY_MAX_S = 0.1
_control = msgspec.json.Decoder(PtyResize | PtySignal | PtyInput)


def _query(request: web.Request) -> TerminalQuery:
    values: dict[str, object] = {key: value for key, value in request.query.items() if key != "command"}
    values["command"] = request.query.getall("command", [])
    try:
        return msgspec.convert(values, TerminalQuery, strict=False)
    except msgspec.ValidationError as exc:
        raise ApiError(422, ErrorCode.INVALID_QUERY, f"invalid query parameters: {exc}",
                       "see /openapi.json for this endpoint's parameters") from None


@routes.get("/v1/sessions/{id}/pty")
@operation(summary="A terminal: upgrades to a WebSocket carrying a shell (or `command`) on a pseudo-terminal in "
                   "the session's sandbox; binary frames carry terminal bytes, text frames JSON control messages "
                   "(see the README's Terminals section)", tag="processes", query=TerminalQuery, status=101,
           errors=(400, 404, 409, 422), description="Answers 101 Switching Protocols; without an Upgrade: "
           "websocket header, 400. `process` reattaches to a terminal kept running (keep=true, or within its "
           "grace period) and replays its output from `offset`.")
async def terminal(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    query = _query(request)
    cols, rows, attach = query.cols, query.rows, query.process
    ws = web.WebSocketResponse(heartbeat=30, max_msg_size=1 << 20)
    if not ws.can_prepare(request).ok:  # checked before a shell starts: nothing to end if it is not one
        raise ApiError(400, ErrorCode.VALIDATION_ERROR, "this route is a WebSocket (a terminal)",
                       "connect with a WebSocket client (Upgrade: websocket), e.g. the console's terminal")
    if attach is not None:
        process = service.processes.get(live, attach)
        if not process.pty:
            raise ApiError(409, ErrorCode.PROCESS_NOT_RUNNING, f"process {attach} has no terminal",
                           "open a new terminal without process=")
        if not process.running:
            raise ApiError(409, ErrorCode.PROCESS_NOT_RUNNING, f"process {attach} is {process.state}",
                           "open a new terminal without process=")
    else:
        body = ProcessStart(command=query.command or list(DEFAULT_SHELL), pty=True, cols=cols, rows=rows, name="terminal")
        process = await service.processes.start(live, body, principal_of(request))
    # From here on the terminal is counted as attached, so whatever ends this handler (a failed
    # handshake, a client gone before the first frame, a cancelled task) starts its grace timer.
    process.follow(terminal=True, keep=query.keep)  # once kept, a reattach without keep=true does not undo it
    pump: asyncio.Future | None = None
    typed: TerminalInput | None = None
    try:
        await ws.prepare(request)
        await ws.send_str(json.dumps({"type": "process", "id": process.id,
                                      "pid": MAIN_NS_PID if process.running else None}))
        if attach is not None:
            process.resize(cols, rows)
        pump = asyncio.ensure_future(_output(ws, process, query.offset))
        typed = TerminalInput(process, ws)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                await typed.put(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                await _handle_control(ws, process, typed, message.data)
            else:
                break
            service.sessions.touch(live)
    finally:
        process.unfollow(terminal=True)
        if not process.attached and not process.kept and process.running:
            grace = service.config.processes.pty_grace_s
            asyncio.get_running_loop().call_later(grace, _end_unless_attached, process)
        if typed is not None:
            typed.close()
        if pump is not None:  # last: awaiting it may be cut short when this handler is cancelled
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
    return ws


def _end_unless_attached(process: BackgroundProcess) -> None:
    if not process.attached and process.running:
        asyncio.ensure_future(asyncio.to_thread(process.kill, 1.0, "stopped: its terminal was closed"))


class TerminalInput:
    """Keystrokes to a terminal's program without ever blocking the event loop.

    Bytes are written as the terminal takes them (non-blocking writes; while its input buffer is
    full, retried a little later); up to PENDING_MAX bytes wait here. Past that, a program that
    does not read is not fed more: the input is dropped and the client told so, while its control
    messages (resize, signal) still act at once."""

    def __init__(self, process: BackgroundProcess, ws: web.WebSocketResponse) -> None:
        self.process = process
        self.ws = ws
        self._pending = bytearray()
        self._ready = asyncio.Event()
        self._task = asyncio.ensure_future(self._write())

    async def put(self, data: bytes) -> None:
        if len(self._pending) + len(data) > PENDING_MAX:
            await self.ws.send_str(json.dumps({
                "type": "error", "message": f"input dropped: the terminal's program has not read the "
                f"{len(self._pending)} bytes typed before; interrupt it with {{\"type\": \"signal\", "
                f"\"signal\": \"INT\"}}"}))
            return
        self._pending += data
        self._ready.set()

    async def _write(self) -> None:
        wait = WRITE_RETRY_S
        while True:
            if not self._pending:
                self._ready.clear()
                await self._ready.wait()
                continue
            try:
                written = self.process.write_some(bytes(self._pending[:WRITE_CHUNK]))
            except ProcessError:
                self._pending.clear()
                return  # it ended: the output pump says so and closes the socket
            del self._pending[:written]
            if written:
                wait = WRITE_RETRY_S
            else:  # its input buffer is full: the program is not reading now
                await asyncio.sleep(wait)
                wait = min(wait * 2, WRITE_RETRY_MAX_S)

    def close(self) -> None:
        self._task.cancel()


async def _handle_control(ws: web.WebSocketResponse, process: BackgroundProcess, typed: TerminalInput,
                          text: str) -> None:
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
        await typed.put(control.data.encode())


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
