"""The Connect protocol as envd speaks it to the E2B SDK: JSON codec, unary and server-streaming calls.

Unary: a POST of `application/json`, answered with the response message as JSON, or an error status
with `{"code": "<connect code>", "message": ...}`. Server streaming: a POST of
`application/connect+json` whose body is one envelope (1 flag byte, a 4-byte big-endian length, the
JSON message), answered with 200 and envelopes: messages (flag 0), then an end-of-stream envelope
(flag 2) holding `{}` or `{"error": {...}}`. Compression is neither sent nor accepted (the SDK
turns it off). Messages use protobuf's JSON mapping: lowerCamel names, bytes as base64, 64-bit
integers as strings, enums by name.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.e2b.upstream import UpstreamError

STATUS_OF = {"canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
             "not_found": 404, "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429,
             "failed_precondition": 400, "aborted": 409, "out_of_range": 400, "unimplemented": 501,
             "internal": 500, "unavailable": 503, "unauthenticated": 401}
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""The largest request message read (envd's requests are small: paths, commands, stdin chunks)."""
END_STREAM = 0x02
SESSION_NOT_FOUND = ErrorCode.SESSION_NOT_FOUND.value


def sandbox_not_found(error: UpstreamError) -> str:
    return f"The sandbox was not found ({error.message})"


class RpcError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def wire(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def rpc_error_of(error: UpstreamError) -> RpcError:
    """The Connect error for an error answer of the API. A sandbox that is not there (killed, expired, or
    another workspace's) answers as E2B's proxy does: unavailable, "... was not found", which the SDK
    raises as SandboxNotRunningException."""
    if error.code == SESSION_NOT_FOUND:
        return RpcError("unavailable", sandbox_not_found(error))
    code = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
            409: "failed_precondition", 413: "resource_exhausted", 415: "invalid_argument",
            416: "out_of_range", 422: "invalid_argument", 429: "resource_exhausted",
            501: "unimplemented", 503: "unavailable", 504: "deadline_exceeded"}.get(error.status, "internal")
    return RpcError(code, error.message)


def error_response(error: RpcError) -> web.Response:
    return web.json_response(error.wire(), status=STATUS_OF.get(error.code, 500))


def _message(data: bytes) -> dict[str, Any]:
    try:
        message = json.loads(data) if data else {}
    except ValueError as exc:
        raise RpcError("invalid_argument", f"the request message is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise RpcError("invalid_argument", "the request message is not a JSON object")
    return message


async def read_unary(request: web.Request) -> dict[str, Any]:
    if request.content_type != "application/json":
        raise RpcError("unimplemented", f"content type {request.content_type!r} is not supported: "
                                        "this server speaks Connect with the JSON codec only")
    return _message(await _body(request, MAX_MESSAGE_BYTES))


async def _body(request: web.Request, limit: int) -> bytes:
    """The whole body (a read returns what has arrived, not all of it), refused past `limit` bytes."""
    chunks, size = [], 0
    while chunk := await request.content.read(limit + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise RpcError("resource_exhausted", f"the request message is larger than {MAX_MESSAGE_BYTES} bytes")
    return b"".join(chunks)


async def read_stream_request(request: web.Request) -> dict[str, Any]:
    """The one message of a server-streaming call (its envelope checked)."""
    if request.content_type != "application/connect+json":
        raise RpcError("unimplemented", f"content type {request.content_type!r} is not supported: "
                                        "this server speaks Connect with the JSON codec only")
    body = await _body(request, MAX_MESSAGE_BYTES + 5)
    if len(body) < 5:
        raise RpcError("invalid_argument", "the request is not a Connect envelope")
    flags, length = struct.unpack(">BI", body[:5])
    if flags & 0x01:
        raise RpcError("unimplemented", "compressed messages are not supported")
    if length != len(body) - 5 or length > MAX_MESSAGE_BYTES:
        raise RpcError("invalid_argument", "the request envelope's length does not match its body")
    return _message(body[5:])


def object_field(message: dict[str, Any], name: str) -> dict[str, Any]:
    """A message field holding a message ({} when absent); anything else is refused."""
    value = message.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RpcError("invalid_argument", f"{name} must be a JSON object")
    return value


def int_field(message: dict[str, Any], name: str, default: int) -> int:
    """An integer field (protobuf's JSON writes 64-bit ones as strings); anything else is refused."""
    value = message.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isascii() \
            or not str(value).lstrip("-").isdigit():
        raise RpcError("invalid_argument", f"{name} must be an integer")
    return int(value)


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


class StreamWriter:
    """A server-streaming answer: messages as they come, then the end of the stream."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(headers={"Content-Type": "application/connect+json"})

    async def start(self) -> None:
        if not self.response.prepared:
            await self.response.prepare(self.request)

    async def send(self, message: dict[str, Any]) -> None:
        await self.start()
        await self.response.write(envelope(message))

    async def end(self, error: RpcError | None = None) -> web.StreamResponse:
        await self.start()
        await self.response.write(envelope({"error": error.wire()} if error else {}, END_STREAM))
        await self.response.write_eof()
        return self.response
