"""What the client raises: the server's error (status, code, message, hint), or a transport failure.

    try:
        client.read_file(session, "missing.txt")
    except NotFoundError as exc:
        print(exc.code, exc.message, exc.hint)      # file_not_found, no file 'missing.txt', ...

Every `ApiError` carries the stable `code` of the service's error body; the subclass
only groups codes by HTTP status, so `except ApiError` catches them all.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

import msgspec

from wasm_runner_protocol.errors import ErrorCode, WasmRunnerError

__all__ = [
    "ApiError", "AuthenticationError", "BadRequestError", "ConflictError", "NotFoundError", "PayloadTooLargeError",
    "PermissionDeniedError", "RateLimitedError", "ServerError", "ServiceUnavailableError", "TransportError",
    "WasmRunnerError", "error_for", "parse_retry_after",
]


class TransportError(WasmRunnerError):
    """The server could not be reached, or the connection failed mid-request (the cause is chained)."""


class ApiError(WasmRunnerError):
    """The server answered with an error."""

    def __init__(self, status: int | None, code: str, message: str, hint: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        """HTTP status; None when the error arrived as an `error` event of a stream already under way."""
        self.code = code
        """Stable and machine-readable, e.g. `session_not_found`, `path_escape`, `overloaded`."""
        self.message = message
        self.hint = hint
        """What to do about it, when the server knows."""
        self.headers: dict[str, str] = dict(headers or {})

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-request-id")

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


class BadRequestError(ApiError):
    """400 or 422: the request is malformed or does not validate."""


class AuthenticationError(ApiError):
    """401: missing or wrong API key."""


class PermissionDeniedError(ApiError):
    """403: e.g. a path that leaves the workspace."""


class NotFoundError(ApiError):
    """404: no such session, file or endpoint."""


class ConflictError(ApiError):
    """409: e.g. the session exists, the edit is not unique, a directory is in the way."""


class PayloadTooLargeError(ApiError):
    """413: over a size limit or the workspace quota."""


class RateLimitedError(ApiError):
    """429: no execution slot (or the session's queue is full); retried automatically first."""

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait, from Retry-After."""
        return parse_retry_after(self.headers.get("retry-after"))


class ServiceUnavailableError(ApiError):
    """503: shutting down or not ready; retried automatically first."""

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("retry-after"))


class ServerError(ApiError):
    """500 and other 5xx."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError, 422: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
    404: NotFoundError, 409: ConflictError, 413: PayloadTooLargeError, 429: RateLimitedError,
    503: ServiceUnavailableError,
}

_ERROR_BODY = msgspec.json.Decoder(dict)


def error_for(status: int | None, body: bytes, headers: Mapping[str, str] | None = None) -> ApiError:
    """The exception for an error response (or an `error` stream event, status None)."""
    code, message, hint = f"http_{status}", body.decode("utf-8", "replace").strip()[:500], None
    try:
        detail = _ERROR_BODY.decode(body).get("error")
    except (msgspec.DecodeError, AttributeError):
        detail = None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        code = detail["code"]
        message = str(detail.get("message") or code)
        hint = detail.get("hint") if isinstance(detail.get("hint"), str) else None
    elif not message:
        message = f"HTTP {status}"
    if status is None:
        by_code: dict[str, type[ApiError]] = {ErrorCode.OVERLOADED: RateLimitedError, ErrorCode.SESSION_BUSY: RateLimitedError,
                                              ErrorCode.SHUTTING_DOWN: ServiceUnavailableError}
        cls = by_code.get(code, ApiError)
    else:
        cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    return cls(status, code, message, hint, lowered)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
