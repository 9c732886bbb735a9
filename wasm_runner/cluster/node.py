"""The node's side of cluster batches: an actor holding a Runner whose lanes run the chunks it is sent.

One `NodeRunner` per node and driver Runner (made a Ray actor by `actors`; this module does not
import Ray), kept for the batches that follow, so the runtimes are prepared once per node.
The chunks of one batch sent while others run join one stream of items through
`Runner.run_many`, so the node's lanes never wait between chunks; a chunk's call answers once
each of its items has.

Like `wasm_runner.worker`, it sits on top of the package: it holds a Runner, and nothing
imports it (the driver names it to Ray).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec

from wasm_runner.cluster.wire import NodeInfo, NodeTools, decode_requests, decode_tools, encode_results, runtimes_fingerprint
from wasm_runner.guest import Mount
from wasm_runner.profiles import McpServerConfig
from wasm_runner.runner import Runner
from wasm_runner.tools import Tool, ToolPolicy, marked_for_approval
from wasm_runner.tools.mcp_source import McpTools
from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["NodeRunner"]

class _Stream:
    """One batch's items on this node: a feed into `Runner.run_many`, and who waits for what."""

    def __init__(self, runner: Runner, lanes: int, tools: NodeTools | None = None) -> None:
        self.feed: asyncio.Queue[ExecRequest] = asyncio.Queue()
        self.waiting: dict[str, tuple[asyncio.Future[ExecResult], str | None]] = {}
        self.tools = tools
        self.task = asyncio.create_task(self._run(runner, lanes))

    async def _requests(self) -> AsyncIterator[ExecRequest]:
        while True:
            yield await self.feed.get()

    async def _run(self, runner: Runner, lanes: int) -> None:
        sources: list[McpTools] = []
        try:
            if self.tools is None:
                results = runner.run_many(self._requests(), concurrency=lanes)
            else:  # the batch's MCP servers, started on this node for its items
                tools, policy = await _started(self.tools, sources)
                results = runner.run_many(self._requests(), concurrency=lanes, tools=tools, tool_policy=policy)
            async with contextlib.aclosing(results):  # type: ignore[type-var]
                async for result in results:
                    entry = self.waiting.pop(result.id or "", None)
                    if entry is not None and not entry[0].done():
                        result.id = entry[1]
                        entry[0].set_result(result)
        except Exception as exc:  # noqa: BLE001 - every chunk waiting fails with it; the driver retries them elsewhere
            self.fail(exc)
            raise
        finally:
            for source in sources:
                await asyncio.to_thread(source.close)

    def fail(self, exc: BaseException) -> None:
        waiting, self.waiting = self.waiting, {}
        for future, _ in waiting.values():
            if not future.done():
                future.set_exception(exc)

    async def stop(self) -> None:
        """Stop its guests still running (`run_many`'s lanes are closed) and fail what waits."""
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        self.fail(asyncio.CancelledError())


async def _started(spec: NodeTools, sources: list[McpTools]) -> tuple[list[Tool], ToolPolicy]:
    """The batch's tools from its MCP servers, started here (`sources` gets each, to close), and its policy."""
    tools: list[Tool] = []
    for fields in spec.servers:
        source = McpServerConfig.model_validate(fields).source()
        sources.append(source)
        tools += marked_for_approval(await asyncio.to_thread(source.start), spec.approval)
    policy = ToolPolicy(call_timeout_s=spec.call_timeout_s, max_calls=spec.max_calls, max_total_s=spec.max_total_s,
                        allow=frozenset(spec.allow) if spec.allow is not None else None)
    return tools, policy


class NodeRunner:
    """A Runner on one node, running the items of its driver's batches on `lanes` lanes each."""

    def __init__(self, lanes: int, data_dir: str | None, mounts: list[dict[str, Any]]) -> None:
        self.own_dir = Path(data_dir) / f"node-{uuid.uuid4().hex}" if data_dir else None
        # Guests run in the Runner's worker processes, never in this one: a crash of one costs its
        # worker, and Ray's own handlers of the trap signals stay out of wasmtime's way.
        self.runner = Runner(self.own_dir, concurrency=lanes, mounts=tuple(Mount.from_config(m) for m in mounts),
                             process_lanes=True)
        self.runner.prepare()  # once per node: the compiled modules are cached on the node's disk
        self.lanes = lanes
        self.numbers = itertools.count()
        self.streams: dict[str, _Stream] = {}

    def info(self) -> NodeInfo:
        version, fingerprints = runtimes_fingerprint()
        return NodeInfo(socket.gethostname(), os.getpid(), self.lanes, version, fingerprints)

    async def run_chunk(self, batch: str, payload: bytes, tools: bytes | None = None) -> bytes:
        """Run the chunk's items (with the batch's others in flight); answer their results in its order.
        `tools`: the batch's tools (`NodeTools`), the same with each of its chunks."""
        stream = self.streams.get(batch)
        if stream is None:
            stream = self.streams[batch] = _Stream(self.runner, self.lanes,
                                                    decode_tools(tools) if tools is not None else None)
        loop = asyncio.get_running_loop()
        futures = []
        for request in decode_requests(payload):
            key = str(next(self.numbers))  # an item's own id may repeat: results are matched by this one
            future: asyncio.Future[ExecResult] = loop.create_future()
            stream.waiting[key] = (future, request.id)
            futures.append(future)
            stream.feed.put_nowait(msgspec.structs.replace(request, id=key))
        return encode_results(await asyncio.gather(*futures))

    async def end_batch(self, batch: str) -> None:
        """The batch is over or cancelled: stop its guests still running; the node stays ready."""
        stream = self.streams.pop(batch, None)
        if stream is not None:
            await stream.stop()

    async def close(self) -> None:
        for batch in list(self.streams):
            await self.end_batch(batch)
        await asyncio.to_thread(self.runner.close)
        if self.own_dir is not None:
            shutil.rmtree(self.own_dir, ignore_errors=True)
