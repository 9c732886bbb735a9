"""A batch whose items may call tools (code mode): each item runs as a one-shot run with the batch's
tools, so each gets its own `ToolRun` (its calls decided, budgeted and recorded in its own result),
at most `limit` at once, results yielded as they complete.

Batch lanes (worker processes running items back to back) have no way back to this process's tools,
so such items take the way of a one-shot run with tools: a throwaway session each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from wasm_runner.errors import InvalidRequestError
from wasm_runner.execution.lanes import each_request
from wasm_runner.execution.results import host_error_result, invalid_request_result
from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["tool_batch_results"]

log = logging.getLogger("wasm_runner")


async def _one(run: Callable[[ExecRequest], Awaitable[ExecResult]], request: ExecRequest) -> ExecResult:
    try:
        return await run(request)
    except InvalidRequestError as exc:
        return invalid_request_result(request, exc)
    except Exception as exc:  # noqa: BLE001 - one item's failure is its result
        log.exception("a batch item with tools failed on the host")
        return host_error_result(request, exc)


async def tool_batch_results(run: Callable[[ExecRequest], Awaitable[ExecResult]],
                             requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest],
                             limit: int) -> AsyncIterator[ExecResult]:
    """`run` each request (requests read lazily, at most `limit` running); results in completion order.
    Closing the iterator cancels the items still running."""
    source = each_request(requests).__aiter__()
    running: set[asyncio.Future[ExecResult]] = set()
    reading: asyncio.Future[ExecRequest] | None = None
    exhausted = False
    try:
        while True:
            if reading is None and not exhausted and len(running) < limit:
                reading = asyncio.ensure_future(source.__anext__())
            waits: set[asyncio.Future[Any]] = set(running) | ({reading} if reading is not None else set())
            if not waits:
                return
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if reading is not None and reading in done:
                try:
                    request = reading.result()
                except StopAsyncIteration:
                    exhausted = True
                else:
                    running.add(asyncio.ensure_future(_one(run, request)))
                reading = None
            for finished in done & running:
                running.discard(finished)
                yield finished.result()
    finally:
        leftover: list[asyncio.Future[Any]] = [*running, *([reading] if reading is not None else [])]
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.gather(*leftover, return_exceptions=True)
