"""Answering an execution as one JSON result, or as server-sent events while it runs.

With `Accept: text/event-stream` the response starts once the execution is admitted
(a 429 is still a plain status), then carries `stdout` and `stderr` events
(`{"text": ...}`) as the guest writes, `tool_call` events when the run calls a caller-side
tool (code mode), and one final `result` event (or `error`).
If the client goes away, writing fails (or aiohttp cancels the handler) and the
execution is cancelled, which stops its guest.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from wasm_runner import OutputListener
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import ErrorDetail, ErrorResponse, StreamChunk
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import encode, json_response, wants_event_stream

Run = Callable[[OutputListener | None, Callable[[], None] | None], Awaitable[msgspec.Struct]]

_START = "start"


async def respond(request: web.Request, run: Run) -> web.StreamResponse:
    if not wants_event_stream(request):
        return json_response(await run(None, None))
    return await _stream(request, run)


def _event(name: str, data: bytes) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


class _EventWriter:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self.decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in ("stdout", "stderr")}

    async def start(self) -> web.StreamResponse:
        if self.response is None:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                                   "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            await response.prepare(self.request)
            self.response = response
        return self.response

    async def output(self, items: list[tuple[str, bytes]]) -> None:
        response = await self.start()
        merged: list[tuple[str, bytes]] = []
        for stream, data in items:
            if stream == _START:
                continue
            if merged and merged[-1][0] == stream and stream in self.decoders:
                merged[-1] = (stream, merged[-1][1] + data)
            else:
                merged.append((stream, data))
        chunks = []
        for stream, data in merged:
            if stream not in self.decoders:  # an event of the host's own (a tool call): its JSON as it is
                chunks.append(_event(stream, data))
                continue
            text = self.decoders[stream].decode(data)
            if text:
                chunks.append(_event(stream, encode(StreamChunk(text))))
        if chunks:
            await response.write(b"".join(chunks))

    async def finish(self, name: str, body: bytes) -> web.StreamResponse:
        response = await self.start()
        tail = []
        for stream, decoder in self.decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                tail.append(_event(stream, encode(StreamChunk(text))))
        await response.write(b"".join(tail) + _event(name, body))
        await response.write_eof()
        return response


async def _stream(request: web.Request, run: Run) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

    def listener(stream: str, data: bytes) -> None:  # on a worker thread
        loop.call_soon_threadsafe(queue.put_nowait, (stream, data))

    def started() -> None:  # on the loop, once admitted
        queue.put_nowait((_START, b""))

    writer = _EventWriter(request)
    task = asyncio.ensure_future(run(listener, started))
    try:
        while True:
            items: list[tuple[str, bytes]] = []
            if queue.empty():
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break
                items.append(getter.result())
            while not queue.empty():
                items.append(queue.get_nowait())
            await writer.output(items)
        items = []
        while not queue.empty():
            items.append(queue.get_nowait())
        try:
            result = task.result()
        except ApiError as exc:
            if writer.response is None:
                raise
            return await writer.finish("error", exc.body())
        except Exception:
            if writer.response is None:
                raise
            body = encode(ErrorResponse(error=ErrorDetail(code=ErrorCode.INTERNAL_ERROR, message="the execution failed")))
            return await writer.finish("error", body)
        if items:
            await writer.output(items)
        return await writer.finish("result", encode(result))
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5)
