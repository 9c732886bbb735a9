"""envd's Connect-RPC services, dispatched by method: Process and Filesystem."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from wasm_runner_server.e2b import filesystem, process
from wasm_runner_server.e2b.connect_rpc import (
    RpcError,
    StreamWriter,
    error_response,
    read_stream_request,
    read_unary,
    rpc_error_of,
)
from wasm_runner_server.e2b.sandbox import SandboxCall
from wasm_runner_server.e2b.upstream import UpstreamError

routes = web.RouteTableDef()

Unary = Callable[[SandboxCall, dict[str, Any]], Awaitable[dict[str, Any]]]
Streaming = Callable[[web.Request, SandboxCall, dict[str, Any], StreamWriter], Awaitable[None]]
UNARY: dict[str, dict[str, Unary]] = {"process.Process": process.UNARY, "filesystem.Filesystem": filesystem.UNARY}
STREAMING: dict[str, dict[str, Streaming]] = {"process.Process": process.STREAMING, "filesystem.Filesystem": {}}


@routes.post("/sandbox/{service:process\\.Process|filesystem\\.Filesystem}/{method}")
async def rpc(request: web.Request) -> web.StreamResponse:
    service, method = request.match_info["service"], request.match_info["method"]
    streaming = STREAMING[service].get(method)
    if streaming is not None:
        writer = StreamWriter(request)
        try:
            message = await read_stream_request(request)
            await streaming(request, SandboxCall(request), message, writer)
        except RpcError as exc:
            return await writer.end(exc)
        except UpstreamError as exc:
            return await writer.end(rpc_error_of(exc))
        except ConnectionResetError:
            return writer.response  # the client went away; a started process keeps running
        return await writer.end()
    unary = UNARY[service].get(method)
    if unary is None:
        return error_response(RpcError("unimplemented", f"{service}.{method} is not supported by this server"))
    try:
        message = await read_unary(request)
        return web.json_response(await unary(SandboxCall(request), message))
    except RpcError as exc:
        return error_response(exc)
    except UpstreamError as exc:
        return error_response(rpc_error_of(exc))
