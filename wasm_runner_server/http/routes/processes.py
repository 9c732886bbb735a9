"""Background processes of a session: start, list, inspect, stdin, signals, stop, output by offset and SSE."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

import msgspec
from aiohttp import web

from wasm_runner.processes import BackgroundProcess, ProcessError
from wasm_runner.processes.ring import utf8_prefix
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.processes import (
    ProcessExit,
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    ProcessOutputQuery,
    ProcessSignal,
    ProcessStart,
    ProcessStdin,
    ProcessStdinResult,
)
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.sessions.manager import LiveSession
from wasm_runner_server.sessions.processes import ring_wakeups
from wasm_runner_server.sessions.service import SERVICE, Service

routes = web.RouteTableDef()

KEEPALIVE_S = 15.0
"""A comment line on an idle SSE stream this often (proxies keep it open, dead clients are noticed)."""
KILL_WAIT_S = 5.0
"""How long a KILL waits for the process to be reaped before answering."""


async def info_of(process: BackgroundProcess) -> ProcessInfo:
    """The process's description, made on a thread: its listening ports are read from the kernel's
    socket tables under /proc, which takes milliseconds."""
    return await asyncio.to_thread(process.info)


def _lookup(request: web.Request) -> tuple[Service, LiveSession, BackgroundProcess]:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    process = service.processes.get(live, request.match_info["pid"])
    service.sessions.touch(live)
    return service, live, process


@routes.post("/v1/sessions/{id}/processes")
@operation(summary="Start a background process (natively, confined like a native run); returns at once",
           tag="processes", body=ProcessStart, response=ProcessInfo, status=201, errors=(402, 404, 409, 422))
async def start_process(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, ProcessStart)
    process = await service.processes.start(live, body, principal_of(request))
    return json_response(await info_of(process), status=201,
                         headers={"Location": f"/v1/sessions/{live.row.id}/processes/{process.id}"})


@routes.get("/v1/sessions/{id}/processes")
@operation(summary="List the session's processes (live ones and the last ended ones)", tag="processes",
           response=ProcessList, errors=(404,))
async def list_processes(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    session = service.processes.core(live)
    processes = session.processes.all()
    infos = live.ended_elsewhere + await asyncio.to_thread(lambda: [p.info() for p in processes])
    return json_response(ProcessList(processes=infos, live=sum(i.state in ("starting", "running") for i in infos),
                                     max_live=session.process_limits.max_live))


@routes.get("/v1/sessions/{id}/processes/{pid}")
@operation(summary="One process: state, pid inside the sandbox, exit code, output sizes, listening ports",
           tag="processes", response=ProcessInfo, errors=(404,))
async def get_process(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    ended = service.processes.ended_elsewhere(service.sessions.get(request.match_info["id"]), request.match_info["pid"])
    if ended is not None:  # it ran on the node the session was on before
        return json_response(ended)
    _, _, process = _lookup(request)
    return json_response(await info_of(process))


@routes.delete("/v1/sessions/{id}/processes/{pid}")
@operation(summary="Stop a process and its whole tree (TERM to all, KILL after the grace period)",
           tag="processes", response=ProcessInfo, errors=(404,))
async def stop_process(request: web.Request) -> web.Response:
    service, _, process = _lookup(request)
    await asyncio.to_thread(process.kill, service.config.processes.stop_grace_s)
    return json_response(await info_of(process))


@routes.post("/v1/sessions/{id}/processes/{pid}/stdin")
@operation(summary="Write to the process's stdin (its terminal for a pty process)", tag="processes",
           body=ProcessStdin, response=ProcessStdinResult, errors=(404, 409, 422))
async def write_stdin(request: web.Request) -> web.Response:
    _, _, process = _lookup(request)
    body = await read_json(request, ProcessStdin)
    try:
        data = base64.b64decode(body.data, validate=True) if body.encoding == "base64" else body.data.encode()
    except ValueError:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "data is not valid base64") from None
    try:
        written = await asyncio.to_thread(process.write, data, body.eof)
    except ProcessError as exc:
        raise not_running(process, str(exc)) from None
    return json_response(ProcessStdinResult(written=written))


@routes.post("/v1/sessions/{id}/processes/{pid}/signal")
@operation(summary="Send a signal (TERM, INT, KILL, HUP, QUIT, USR1, USR2) to the process, or its whole tree; "
                   "KILL answers once the process has ended", tag="processes", body=ProcessSignal,
           response=ProcessInfo, errors=(404, 409, 422))
async def signal_process(request: web.Request) -> web.Response:
    _, _, process = _lookup(request)
    body = await read_json(request, ProcessSignal)
    if not await asyncio.to_thread(process.signal, body.signal, body.tree):
        raise not_running(process, f"process {process.id} is not running")
    if body.signal == "KILL":  # it cannot be caught: its end is a moment away, and the answer shows it
        await asyncio.to_thread(process.wait, KILL_WAIT_S)
    return json_response(await info_of(process))


@routes.get("/v1/sessions/{id}/processes/{pid}/output")
@operation(summary="Output of one stream from a byte offset; with Accept: text/event-stream, an SSE stream "
                   "that resumes from `offset` or Last-Event-ID", tag="processes", query=ProcessOutputQuery,
           response=ProcessOutput, errors=(404, 422))
async def process_output(request: web.Request) -> web.StreamResponse:
    _, _, process = _lookup(request)
    query = read_query(request, ProcessOutputQuery)
    if "text/event-stream" in request.headers.get("Accept", ""):
        return await _stream(request, process, query)
    ring = process.ring(query.stream)
    if query.wait_s > 0 and ring.end <= query.offset and not ring.closed:
        await _wait(ring, query.offset, query.wait_s)
    return json_response(_chunk(process, query, query.offset))


def _chunk(process: BackgroundProcess, query: ProcessOutputQuery, offset: int) -> ProcessOutput:
    ring = process.ring(query.stream)
    closed = ring.closed
    chunk = ring.read(offset, query.limit)
    data = chunk.data
    if query.encoding == "utf-8":
        data = utf8_prefix(data, final=closed)
        text = data.decode("utf-8", "replace")
    else:
        text = base64.b64encode(data).decode("ascii")
    return ProcessOutput(stream=query.stream, offset=chunk.offset, next_offset=chunk.offset + len(data), data=text,
                         encoding=query.encoding, dropped=chunk.dropped, state=process.state,
                         exit_code=process.exit_code)


async def _wait(ring, offset: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    unsubscribe = ring.subscribe(lambda: loop.call_soon_threadsafe(event.set))
    try:
        if ring.end <= offset and not ring.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
    finally:
        unsubscribe()


async def _stream(request: web.Request, process: BackgroundProcess, query: ProcessOutputQuery) -> web.StreamResponse:
    """SSE: `output` events (id = the next offset, so a reconnect with Last-Event-ID resumes), then `exit`."""
    offset = query.offset
    last = request.headers.get("Last-Event-ID", "")
    if last.isdigit():
        offset = int(last)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    ring = process.ring(query.stream)
    process.follow()  # a client following the output keeps the session from hibernating
    try:
        with ring_wakeups(ring) as event:
            while True:
                event.clear()
                closed = ring.closed
                out = _chunk(process, query, offset)
                if out.data or out.dropped:
                    payload = json.dumps({"stream": out.stream, "offset": out.offset, "next_offset": out.next_offset,
                                          "dropped": out.dropped, "data": out.data, "encoding": out.encoding})
                    await response.write(f"id: {out.next_offset}\nevent: output\ndata: {payload}\n\n".encode())
                    offset = out.next_offset
                    continue
                if closed:
                    end = msgspec.json.encode(ProcessExit(state=process.state, exit_code=process.exit_code,
                                                          error=process.error()))
                    await response.write(b"event: exit\ndata: " + end + b"\n\n")
                    break
                try:
                    await asyncio.wait_for(event.wait(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
    except ConnectionResetError:
        pass  # the client went away: it resumes from the last id it saw
    finally:
        process.unfollow()
    return response


def not_running(process: BackgroundProcess, message: str) -> ApiError:
    return ApiError(409, ErrorCode.PROCESS_NOT_RUNNING, message,
                    f"the process is {process.state}; start another with POST /v1/sessions/{{id}}/processes")
