"""The service's errors: one exception type, one JSON shape, one middleware that renders both.

Handlers raise `ApiError` (or let a `FileOpError` from the core through); everything
else that escapes a handler (aiohttp's own HTTP errors, decoding errors) is turned
into the same `{"error": {"code", "message", "hint"}}` body here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, BadHttpMethod, HttpProcessingError, LineTooLong

from wasm_runner.workspace.file_errors import (
    BudgetExceededError,
    DirectoryNotEmptyError,
    EditError,
    EditNotFoundError,
    EditNotUniqueError,
    FileOpError,
    FileTooLargeError,
    InvalidPathError,
    InvalidPatternError,
    IsDirectoryError,
    NoSuchFileError,
    NotDirectoryError,
    NotRegularFileError,
    NotTextError,
    OperationCancelledError,
    PatchError,
    PathEscapeError,
)
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import ErrorDetail, ErrorResponse
from wasm_runner_server.metadata.sql import UNREACHABLE

log = logging.getLogger("wasm_runner.server")

_encoder = msgspec.json.Encoder()


class ApiError(Exception):
    """An error answered to the client: HTTP status, stable code, message and hint."""

    def __init__(self, status: int, code: ErrorCode, message: str, hint: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.hint = hint
        self.headers = dict(headers or {})

    def body(self) -> bytes:
        return _encoder.encode(ErrorResponse(error=ErrorDetail(code=self.code, message=self.message, hint=self.hint)))

    def response(self) -> web.Response:
        return web.Response(status=self.status, body=self.body(), content_type="application/json",
                            headers=self.headers)


def not_found(code: ErrorCode, name: str, hint: str | None = None) -> ApiError:
    """A 404 worded from its code: `not_found(ErrorCode.KEY_NOT_FOUND, "k")` says "no key 'k'"."""
    what = code.removesuffix("_not_found").replace("_", " ")
    return ApiError(404, code, f"no {what} {name!r}", hint)


def session_not_found(session_id: str, hint: str = "create one with POST /v1/sessions") -> ApiError:
    """What a session that does not exist answers; a session the caller may not see answers exactly this."""
    return not_found(ErrorCode.SESSION_NOT_FOUND, session_id, hint)


def on_other_node(session_id: str, node: str) -> ApiError:
    """What a node answers for a session whose files and kernels another node of the cluster holds
    (421 Misdirected Request: the request is fine, this node is not the one to serve it)."""
    return ApiError(421, ErrorCode.SESSION_ON_OTHER_NODE, f"session {session_id!r} lives on node {node!r}",
                    f"send its calls to node {node!r}; this node can list it, not run it")


def overloaded(retry_after: int, message: str, code: ErrorCode = ErrorCode.OVERLOADED,
               hint: str = "retry after the number of seconds in Retry-After") -> ApiError:
    return ApiError(429, code, message, hint, {"Retry-After": str(retry_after)})


_FILE_STATUS: dict[type[FileOpError], int] = {
    PathEscapeError: 403,
    InvalidPathError: 400,
    NoSuchFileError: 404,
    IsDirectoryError: 409,
    NotDirectoryError: 409,
    NotRegularFileError: 409,
    DirectoryNotEmptyError: 409,
    FileTooLargeError: 413,
    NotTextError: 415,
    EditNotFoundError: 422,
    EditNotUniqueError: 409,
    EditError: 422,
    PatchError: 409,
    InvalidPatternError: 422,
    BudgetExceededError: 422,
    OperationCancelledError: 503,
}


def from_file_error(exc: FileOpError) -> ApiError:
    status = 400
    for cls in type(exc).__mro__:
        if cls in _FILE_STATUS:
            status = _FILE_STATUS[cls]
            break
    hint = exc.hint
    if hint is None and isinstance(exc, PathEscapeError):
        hint = "paths are relative to the workspace; '..', absolute paths elsewhere and symbolic links are refused"
    return ApiError(status, exc.code, exc.message, hint)


def from_validation(exc: msgspec.ValidationError | msgspec.DecodeError) -> ApiError:
    if isinstance(exc, msgspec.ValidationError):
        return ApiError(422, ErrorCode.VALIDATION_ERROR, str(exc), "see /openapi.json for the request schema")
    return ApiError(400, ErrorCode.INVALID_JSON, f"the body is not valid JSON: {exc}", "send a JSON object")


_HTTP_CODES = {
    400: ErrorCode.BAD_REQUEST, 404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED,
    406: ErrorCode.NOT_ACCEPTABLE, 408: ErrorCode.REQUEST_TIMEOUT, 411: ErrorCode.LENGTH_REQUIRED,
    413: ErrorCode.BODY_TOO_LARGE, 414: ErrorCode.URI_TOO_LONG, 415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    416: ErrorCode.RANGE_NOT_SATISFIABLE, 431: ErrorCode.HEADERS_TOO_LARGE,
}


def from_http_exception(exc: web.HTTPException) -> ApiError:
    status = exc.status
    code = _HTTP_CODES.get(status, ErrorCode.HTTP_ERROR)
    message = exc.reason or "error"
    text = exc.text if isinstance(exc.text, str) else ""
    if text and not text.startswith(f"{status}:"):
        message = text
    hint = None
    if status == 404:
        message, hint = "no such endpoint", "see /openapi.json for the API"
    elif status == 405:
        allowed = exc.headers.get("Allow", "")
        message, hint = "method not allowed here", f"allowed: {allowed}" if allowed else None
    elif status == 413:
        message, hint = "the request body is too large", "send less, or stream files with PUT"
    headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
    return ApiError(status, code, message, hint, headers)


PARSER_HINT = "the request is not valid HTTP/1.1: check the request line, the headers and the body's framing"


def parser_error(status: int, exc: BaseException | None, message: str | None) -> ApiError:
    """The error answered for what aiohttp's server refused or failed at, before or around a handler."""
    if status == 500:
        return ApiError(500, ErrorCode.INTERNAL_ERROR, "the server failed to handle this request",
                        "retry; if it persists, report it with the time of the request")
    if status == 504:
        return ApiError(504, ErrorCode.HANDLER_TIMEOUT, "the request took too long to handle", "retry later")
    text = (message or getattr(exc, "message", "") or "").strip()
    text = text.splitlines()[0].rstrip(":") if text else "malformed request"
    if isinstance(exc, LineTooLong):
        return ApiError(status, ErrorCode.LINE_TOO_LONG, f"a request line or header is too long ({text})",
                        "keep URLs and each header under 8 KiB; send data in the body")
    if isinstance(exc, BadHttpMethod):
        return ApiError(status, ErrorCode.BAD_METHOD, f"the request's method is not valid ({text})", PARSER_HINT)
    if isinstance(exc, BadHttpMessage) and "too many headers" in text.lower():
        return ApiError(status, ErrorCode.TOO_MANY_HEADERS, "the request has too many headers", "send fewer headers")
    return ApiError(status, ErrorCode.MALFORMED_REQUEST, f"the request could not be parsed: {text[:300]}", PARSER_HINT)


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except FileOpError as exc:
        return from_file_error(exc).response()
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return from_validation(exc).response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return from_http_exception(exc).response()
    except HttpProcessingError as exc:  # the body's framing broke while a handler read it
        response = parser_error(400, exc, exc.message).response()
        response.force_close()
        return response
    except (ConnectionResetError, BrokenPipeError):
        raise
    except UNREACHABLE:  # a cluster's metadata database is down or out of connections: worth a retry
        log.exception("metadata database unreachable", extra={"event": "metadata_unavailable",
                                                              "path": request.path})
        return ApiError(503, ErrorCode.METADATA_UNAVAILABLE, "the metadata database cannot be reached",
                        "retry after the number of seconds in Retry-After", {"Retry-After": "1"}).response()
    except Exception:
        log.exception("unhandled error", extra={"event": "internal_error", "path": request.path})
        return ApiError(500, ErrorCode.INTERNAL_ERROR, "the server failed to handle this request",
                        "retry; if it persists, report it with the time of the request").response()
