"""aiohttp's HTTP server, answering even what fails before any handler runs in the service's error shape.

aiohttp's parser refuses some requests before routing (a malformed request line, method or
version; a request line or header past `max_line_size`/`max_field_size`; too many headers; a
bad header name; a malformed Content-Length or chunked framing; Content-Length beside
Transfer-Encoding) and answers them itself, as text/plain, closing the connection. So does its
connection handler for what escapes every middleware (500) and a handler's timeout (504). Its
only way to change those answers is the connection handler's `handle_error`, so
`ServiceRunner` (an `AppRunner`) serves the application with a handler whose `handle_error`
answers `{"error": {"code", "message", "hint"}}` with the same status, and still closes.
A body whose chunked framing breaks while a handler reads it reaches the error middleware
instead (errors.py), as the same 400.

What aiohttp does not let us answer: with its C parser (the default), chunked framing that
breaks after the handler started is never passed to the handler, so that request gets no
answer until the client leaves; a client that sends less body than its Content-Length and
closes gets none either (no one is left to answer); and a failure after the response started
can only cut the connection.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from wasm_runner_server.errors import parser_error


class JsonErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, with its own error answers in the service's error shape."""

    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # logs, and raises if the response had started
        response = parser_error(status, exc, message).response()
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    """The low-level server, making `JsonErrorRequestHandler`s for its connections."""

    def __call__(self) -> RequestHandler:
        return JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


class ServiceRunner(web.AppRunner):
    """`web.AppRunner` whose server answers parser-level errors in the service's error shape."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = JsonErrorServer  # the application's server, its connections made our way
        return server
