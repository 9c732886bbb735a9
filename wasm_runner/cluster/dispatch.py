"""The driver's side of a cluster batch: items out to the node actors in chunks, results back.

Items are read lazily into a window of `lanes x chunks_per_actor x chunk_items`, so neither the
driver nor Ray's object store ever holds the whole batch; each actor has up to
`chunks_per_actor` of the batch's chunks in flight, and a chunk is sent with what is read,
never waiting to fill up. Results are yielded as their chunk answers.

A chunk answers all its items or none, so an item is never answered twice: when the actor or
node running it is lost, its items go to the front of the queue for another actor (their
results say `retried`), the cluster is looked at again for nodes without an actor, and an item
lost `max_attempts` times gets a HostError result instead. Closing the iterator stops the
batch's guests on every node; the actors stay for the Runner's next batch.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

from wasm_runner.cluster.actors import NodeActor, NodeActors
from wasm_runner.cluster.settings import ClusterUnavailableError, RayCluster
from wasm_runner.cluster.wire import NodeInfo, decode_results, encode_requests, runtimes_fingerprint
from wasm_runner.execution.lanes import each_request
from wasm_runner_protocol.execution import ExecRequest, ExecResult, GuestError

__all__ = ["ClusterBatch"]

log = logging.getLogger("wasm_runner")

END_GRACE_S = 3.0
"""How long the actors get to stop the batch's guests when it ends."""


class _Item:
    __slots__ = ("attempts", "request")

    def __init__(self, request: ExecRequest) -> None:
        self.request = request
        self.attempts = 0


class ClusterBatch:
    """One `Runner.run_many(..., cluster=...)` call, on the Runner's actors for that cluster."""

    def __init__(self, actors: NodeActors, cluster: RayCluster, tools: bytes | None = None) -> None:
        self.pool = actors
        self.cluster = cluster
        self.tools = tools
        """The batch's tools on the nodes (`NodeTools`, encoded), sent with each chunk."""
        self.id = uuid.uuid4().hex
        self.chunks: dict[NodeActor, int] = {}
        """The batch's chunks in flight per ready actor."""
        self.queue: collections.deque[_Item] = collections.deque()
        """Items read (or given back by a lost actor, in front) and not yet sent."""
        self.answered: collections.deque[tuple[list[_Item], NodeActor, asyncio.Future[bytes]]] = collections.deque()
        self.wakeup = asyncio.Event()
        self.exhausted = False
        self.read_error: BaseException | None = None
        self.outstanding = 0
        """Items read whose result is not out yet."""
        self.starting: set[NodeActor] = set()
        self.looking = 0
        """Looks for new nodes under way."""
        self.start_error = "no node of the cluster is ready"
        self.tasks: set[asyncio.Task[None]] = set()

    async def results(self, requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest]) -> AsyncIterator[ExecResult]:
        reader: asyncio.Task[None] | None = None
        self.pool.begin_batch()
        try:
            await self._first_ready()
            lanes = sum(actor.lanes for actor in self.pool.live())  # the ones still starting too
            self.room = asyncio.Semaphore(lanes * self.cluster.chunks_per_actor * self.cluster.chunk_items)
            reader = asyncio.create_task(self._read(requests))
            while True:
                self._dispatch()
                while self.answered:
                    for result in self._answer(*self.answered.popleft()):
                        self.outstanding -= 1
                        self.room.release()
                        yield result
                if self.read_error is not None:
                    raise self.read_error
                if self.exhausted and self.outstanding == 0:
                    return
                if not self.chunks and not self.starting and not self.looking:
                    raise ClusterUnavailableError(f"no node of the Ray cluster is left to run the batch's "
                                                  f"{self.outstanding} unfinished items ({self.start_error})")
                self.wakeup.clear()
                if not self.answered:
                    await self.wakeup.wait()
        finally:
            if reader is not None:
                reader.cancel()
            for task in list(self.tasks):
                task.cancel()
            try:
                await self._end()
            finally:
                self.pool.end_batch(self.cluster.keep_actors_s)

    # -- actors ----------------------------------------------------------------------

    async def _first_ready(self) -> None:
        """Until one actor is ready (the others join the batch as they get ready)."""
        await self._look_for_nodes(first=True)
        while not self.chunks:
            if not self.starting and not self.looking:
                raise ClusterUnavailableError(f"no actor could start on the Ray cluster: {self.start_error}")
            self.wakeup.clear()
            await self.wakeup.wait()

    async def _look_for_nodes(self, first: bool = False) -> None:
        self.looking += 1
        try:
            problem = await self.pool.refresh()
        except ClusterUnavailableError as exc:
            if first:  # the cluster cannot be reached: the batch's own error, said as it is
                raise
            problem = str(exc)  # the cluster's head went away mid-batch: no node to add
        finally:
            self.looking -= 1
            self.wakeup.set()
        if problem is not None:
            self.start_error = problem
        for actor in self.pool.live():
            if actor not in self.chunks and actor not in self.starting:
                self.starting.add(actor)
                self._spawn(self._await_ready(actor))

    async def _await_ready(self, actor: NodeActor) -> None:
        try:
            info: NodeInfo = await asyncio.wait_for(_future(actor.started), self.cluster.start_timeout_s)
            if (info.version, info.fingerprints) != runtimes_fingerprint():
                raise ClusterUnavailableError(
                    f"node {info.host} runs wasm-runner {info.version} with other runtimes than this driver's: "
                    "install the same version on every node")
        except Exception as exc:  # noqa: BLE001 - the node is left out; the batch goes on with the others
            self.start_error = str(exc) or type(exc).__name__
            log.warning("a batch actor on Ray node %s could not start: %s", actor.node_id, self.start_error)
            self.pool.lose(actor)
        else:
            actor.ready = not actor.lost
            if actor.ready:
                self.chunks[actor] = 0
        finally:
            self.starting.discard(actor)
            self.wakeup.set()

    def _lost(self, actor: NodeActor, exc: BaseException) -> None:
        if actor in self.chunks:
            del self.chunks[actor]
            log.warning("lost the batch actor on Ray node %s (%s): its items run again elsewhere",
                        actor.node_id, type(exc).__name__)
            self.pool.lose(actor)
            self._spawn(self._look_for_nodes())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _end(self) -> None:
        """Stop the batch's guests on every node it used (an actor that does not answer is lost)."""
        actors = list(self.chunks)
        ending = {_future(actor.handle.end_batch.remote(self.id)): actor for actor in actors}
        if not ending:
            return
        done, _ = await asyncio.wait(ending, timeout=END_GRACE_S)
        for future, actor in ending.items():
            if future not in done or future.exception() is not None:
                self.pool.lose(actor)

    # -- items -----------------------------------------------------------------------

    async def _read(self, requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest]) -> None:
        try:
            async for request in each_request(requests):
                await self.room.acquire()
                self.queue.append(_Item(request))
                self.outstanding += 1
                self.wakeup.set()
        except Exception as exc:  # noqa: BLE001 - the consumer gets it
            self.read_error = exc
        self.exhausted = True
        self.wakeup.set()

    def _dispatch(self) -> None:
        """Send chunks while an actor has room: to the least busy first, so a short batch spreads."""
        while self.queue:
            free = [actor for actor, chunks in self.chunks.items() if chunks < self.cluster.chunks_per_actor]
            if not free:
                return
            actor = min(free, key=lambda a: self.chunks[a] / a.lanes)
            size = min(self.cluster.chunk_items, math.ceil(len(self.queue) / len(free)))
            chunk = [self.queue.popleft() for _ in range(size)]
            for item in chunk:
                item.attempts += 1
            payload = encode_requests([item.request for item in chunk])
            future = _future(actor.handle.run_chunk.remote(self.id, payload, self.tools))
            self.chunks[actor] += 1
            future.add_done_callback(functools.partial(self._chunk_done, chunk, actor))

    def _chunk_done(self, chunk: list[_Item], actor: NodeActor, future: asyncio.Future[bytes]) -> None:
        if not future.cancelled():
            future.exception()  # looked at: once the batch is over, nothing else does (a chunk ended with it)
        if actor in self.chunks:
            self.chunks[actor] -= 1
        self.answered.append((chunk, actor, future))
        self.wakeup.set()

    def _answer(self, chunk: list[_Item], actor: NodeActor, future: asyncio.Future[bytes]) -> list[ExecResult]:
        """The chunk's results, or (its actor lost) the results of its items out of attempts."""
        try:
            results = decode_results(future.result())
        except Exception as exc:  # noqa: BLE001 - the actor or its node is lost: its items run elsewhere
            self._lost(actor, exc)
            given_up = []
            for item in reversed(chunk):
                if item.attempts >= self.cluster.max_attempts:
                    given_up.append(_given_up_result(item, exc))
                else:
                    self.queue.appendleft(item)
            return given_up
        for item, result in zip(chunk, results, strict=True):
            result.retried = item.attempts > 1
        return results


def _given_up_result(item: _Item, exc: BaseException) -> ExecResult:
    request = item.request
    return ExecResult(exit_code=1, id=request.id, group=request.group, language=request.language, retried=True,
                      error=GuestError(type="HostError", message=(
                          f"the Ray actor or node running this item was lost {item.attempts} times "
                          f"({type(exc).__name__}); it did not finish: run it again")))


def _future(ref: Any) -> asyncio.Future[Any]:
    return asyncio.wrap_future(ref.future())
