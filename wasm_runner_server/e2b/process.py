"""envd's Connect-RPC Process service on a session's background processes.

Start runs the command as a background process of the session (natively, confined as any of its
processes) and follows its output; Connect follows one already running, from now on. A process's
pid is its number in the API (`p3` is pid 3). stdout and stderr are followed as two server-sent
event streams of the API, merged in the order they arrive; the stream ends with the exit, after
both streams closed. Closing the stream does not stop the process (E2B's background commands).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from wasm_runner_server.e2b.connect_rpc import (
    SESSION_NOT_FOUND,
    RpcError,
    StreamWriter,
    int_field,
    object_field,
    rpc_error_of,
)
from wasm_runner_server.e2b.paths import absolute, relative
from wasm_runner_server.e2b.sandbox import SandboxCall
from wasm_runner_server.e2b.upstream import UpstreamError, events, session_path

SIGNALS: dict[str | int, str] = {"SIGNAL_SIGKILL": "KILL", "SIGNAL_SIGTERM": "TERM", 9: "KILL", 15: "TERM"}
MAX_PID = 10**9
START_WAIT_S = 30.0
"""How long Start waits for the process to leave `starting` (a sandbox is set up in milliseconds)."""
START_POLL_S = 0.01


def _process_id(message: dict[str, Any]) -> str:
    selector = object_field(message, "process")
    if "tag" in selector and selector.get("pid") is None:
        raise RpcError("unimplemented", "selecting a process by tag is not supported here: use its pid")
    if selector.get("pid") is None:
        raise RpcError("invalid_argument", "give the process's pid")
    number = int_field(selector, "pid", 0)
    if not 0 < number < MAX_PID:
        raise RpcError("not_found", f"process {number} not found")
    return f"p{number}"


def _pid(process_id: str) -> int:
    return int(process_id[1:])


def _not_found(exc: UpstreamError, pid: str) -> RpcError:
    if exc.status == 404 and exc.code != SESSION_NOT_FOUND:
        return RpcError("not_found", f"process {_pid(pid)} not found")
    if exc.status == 409:
        return RpcError("not_found", f"process {_pid(pid)} is not running")
    return rpc_error_of(exc)


def _start_body(message: dict[str, Any]) -> dict[str, Any]:
    config = object_field(message, "process")
    cmd = config.get("cmd")
    if not isinstance(cmd, str) or not cmd:
        raise RpcError("invalid_argument", "give the command to run (process.cmd)")
    args = config.get("args") or []
    envs = config.get("envs") or {}
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise RpcError("invalid_argument", "process.args must be a list of strings")
    if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
        raise RpcError("invalid_argument", "process.envs must map names to strings")
    body: dict[str, Any] = {"command": [cmd, *args], "env": envs, "stdin": bool(message.get("stdin", False))}
    if config.get("cwd"):
        body["cwd"] = relative(str(config["cwd"]), what="working directory")
    if message.get("pty") is not None:
        size = object_field(object_field(message, "pty"), "size")
        body.update(pty=True, stdin=True, cols=int_field(size, "cols", 80) or 80, rows=int_field(size, "rows", 24) or 24)
    if message.get("tag"):
        body["name"] = str(message["tag"])[:200]
    return body


async def start(request: web.Request, call: SandboxCall, message: dict[str, Any], writer: StreamWriter) -> None:
    body = _start_body(message)
    info = await call.upstream.call("POST", session_path(call.sandbox_id, "processes"), json_body=body)
    await _started(call, info)
    await writer.send({"event": {"start": {"pid": _pid(info["id"])}}})
    await _follow(call, info["id"], writer, offsets=(0, 0), pty=bool(body.get("pty")))


async def _started(call: SandboxCall, info: dict[str, Any]) -> None:
    """Wait until the process has started (or failed to), as envd answers Start once it runs: a signal or
    stdin sent right after the answer then reaches it."""
    deadline = asyncio.get_running_loop().time() + START_WAIT_S
    path = session_path(call.sandbox_id, "processes", info["id"])
    while info.get("state") == "starting" and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(START_POLL_S)
        info = await call.upstream.call("GET", path)


async def connect(request: web.Request, call: SandboxCall, message: dict[str, Any], writer: StreamWriter) -> None:
    process_id = _process_id(message)
    try:
        info = await call.upstream.call("GET", session_path(call.sandbox_id, "processes", process_id))
    except UpstreamError as exc:
        raise _not_found(exc, process_id) from None
    await writer.send({"event": {"start": {"pid": _pid(process_id)}}})
    offsets = (int(info.get("stdout_bytes", 0)), int(info.get("stderr_bytes", 0)))
    await _follow(call, process_id, writer, offsets=offsets, pty=bool(info.get("pty")))


async def _follow(call: SandboxCall, process_id: str, writer: StreamWriter, *, offsets: tuple[int, int],
                  pty: bool) -> None:
    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
    streams = ("stdout",) if pty else ("stdout", "stderr")

    async def read(stream: str, offset: int) -> None:
        path = session_path(call.sandbox_id, "processes", process_id, "output")
        params = {"stream": stream, "offset": str(offset), "encoding": "base64"}
        try:
            async with call.upstream.stream("GET", path, params=params,
                                            headers={"Accept": "text/event-stream"}) as response:
                async for name, data in events(response):
                    await queue.put((name if name == "exit" else stream, json.loads(data)))
                    if name == "exit":
                        return
        except UpstreamError as exc:
            await queue.put(("error", {"error": exc}))
            return
        await queue.put(("exit", {}))

    tasks = [asyncio.create_task(read(s, o)) for s, o in zip(streams, offsets, strict=False)]
    try:
        open_streams, end = len(tasks), dict[str, Any]()
        while open_streams:
            kind, payload = await queue.get()
            if kind == "error":
                raise payload["error"]
            if kind == "exit":
                open_streams -= 1
                end = payload or end
                continue
            if payload.get("data"):
                field = "pty" if pty else kind
                await writer.send({"event": {"data": {field: payload["data"]}}})
        info = await call.upstream.call("GET", session_path(call.sandbox_id, "processes", process_id))
        await writer.send({"event": {"end": _end(info, end)}})
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _end(info: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    code = info.get("exit_code", end.get("exit_code"))
    code = -1 if code is None else int(code)
    signal = info.get("signal")
    result: dict[str, Any] = {"exitCode": code, "exited": signal is None,
                              "status": f"signal: {signal.lower()}" if signal else f"exit status {code}"}
    error = info.get("error") or end.get("error")
    if error:
        result["error"] = str(error)
    return result


async def list_processes(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    listing = await call.upstream.call("GET", session_path(call.sandbox_id, "processes"))
    found = []
    for info in listing.get("processes", []):
        if info.get("state") not in ("starting", "running"):
            continue
        argv = info.get("argv") or [""]
        entry: dict[str, Any] = {"config": {"cmd": argv[0], "args": argv[1:], "envs": {}, "cwd": absolute("")},
                                 "pid": _pid(info["id"])}
        if info.get("name"):
            entry["tag"] = info["name"]
        found.append(entry)
    return {"processes": found}


async def send_input(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    process_id = _process_id(message)
    given = object_field(message, "input")
    data = given.get("stdin") if "stdin" in given else given.get("pty")
    try:
        base64.b64decode(data or "", validate=True)
    except (ValueError, TypeError):
        raise RpcError("invalid_argument", "input is not valid base64") from None
    await _stdin(call, process_id, {"data": data or "", "encoding": "base64"})
    return {}


async def close_stdin(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    await _stdin(call, _process_id(message), {"data": "", "eof": True})
    return {}


async def _stdin(call: SandboxCall, process_id: str, body: dict[str, Any]) -> None:
    try:
        await call.upstream.call("POST", session_path(call.sandbox_id, "processes", process_id, "stdin"),
                                 json_body=body)
    except UpstreamError as exc:
        raise _not_found(exc, process_id) from None


async def send_signal(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    process_id = _process_id(message)
    signal = SIGNALS.get(message.get("signal") or "")
    if signal is None:
        raise RpcError("invalid_argument", "the signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
    try:
        await call.upstream.call("POST", session_path(call.sandbox_id, "processes", process_id, "signal"),
                                 json_body={"signal": signal, "tree": True})
    except UpstreamError as exc:
        raise _not_found(exc, process_id) from None
    return {}


UNARY: dict[str, Callable[[SandboxCall, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "List": list_processes, "SendInput": send_input, "CloseStdin": close_stdin, "SendSignal": send_signal}
STREAMING: dict[str, Callable[[web.Request, SandboxCall, dict[str, Any], StreamWriter], Awaitable[None]]] = {
    "Start": start, "Connect": connect}
