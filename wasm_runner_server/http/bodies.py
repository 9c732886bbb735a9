"""Decoding request bodies and query strings into wire Structs, and encoding responses."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from aiohttp import web

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder] = {}


def encode(obj: object) -> bytes:
    return _encoder.encode(obj)


def json_response(obj: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=_encoder.encode(obj), status=status, content_type="application/json", headers=headers)


_LENIENT = {"", "text/plain", "application/x-www-form-urlencoded", "application/octet-stream"}
"""Media types taken as JSON anyway: what curl -d and minimal clients send by default."""


def _is_json(content_type: str) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or mime.endswith("+json") or mime in _LENIENT


async def read_json(request: web.Request, type_: type[T], *, empty_ok: bool = False) -> T:
    """The JSON body as `type_`: 415 for another media type, 413 past the size limit,
    400 for malformed JSON, 422 for wrong types and unknown fields."""
    content_type = request.headers.get("Content-Type")
    if content_type is not None and not _is_json(content_type):
        raise ApiError(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"expected a JSON body, got {content_type.split(';')[0]!r}",
                       "send Content-Type: application/json")
    body = await request.read()
    if not body.strip():
        if empty_ok:
            body = b"{}"
        else:
            raise ApiError(400, ErrorCode.INVALID_JSON, "the request body is empty", "send a JSON object")
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    return decoder.decode(body)


def read_query(request: web.Request, type_: type[T]) -> T:
    """The query string as `type_` (strings converted to numbers and booleans); 422 when it does not fit."""
    values = {key: value for key, value in request.query.items()}
    try:
        return msgspec.convert(values, type_, strict=False)
    except msgspec.ValidationError as exc:
        raise ApiError(422, ErrorCode.INVALID_QUERY, f"invalid query parameters: {exc}",
                       "see /openapi.json for this endpoint's parameters") from None


def wants_event_stream(request: web.Request) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")
