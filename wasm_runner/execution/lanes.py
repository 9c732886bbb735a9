"""`Runner.run_many`: lanes that run batch items back to back.

A lane owns a scratch workspace. It takes the next item from the batch's
read-ahead, runs it one-shot in the instance kept for its workspace, hands the
result back, resets the instance and goes on; the event loop only reads requests
ahead and passes results on. (Going through `Runner.run` per item, a task, a
future and two thread hand-offs each, cost a third of the CPU a check takes.)

Lanes run in worker processes (`workers.ProcessLanes`) where they can: two lanes as
threads of one process reached 1.7-2.0x one lane's checks/s on 2 cores, two
processes 2.2x (host-side work of the two contends in one interpreter and one
address space). A Runner with providers of its own (which cannot be rebuilt in
another process) runs its lanes as worker threads, which give their worker back
every `LANE_ITEMS` items so that a session's call is not held behind a batch.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any, Protocol

from wasm_runner.errors import InvalidRequestError, RunnerClosedError
from wasm_runner.execution.executor import WATCHDOG_POLL_S, Executor, is_overdue
from wasm_runner.execution.results import host_error_result, invalid_request_result, no_worker_result
from wasm_runner.execution.scratch import ScratchPool
from wasm_runner.providers.base import Job, Provider
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.execution import ExecRequest, ExecResult

ProviderFor = Callable[[ExecRequest], Provider]
"""The provider that runs a request (raises InvalidRequestError when none does)."""

log = logging.getLogger("wasm_runner")

LANE_ITEMS = 32
"""Items a thread lane runs before its worker serves whatever else is queued (about 0.1 s of checks)."""


class ItemLane:
    """Runs items one after another in a scratch workspace of its own (one thread at a time)."""

    def __init__(self, provider_for: ProviderFor, scratch: ScratchPool) -> None:
        self.provider_for = provider_for
        self.scratch = scratch
        self.workspace: Workspace | None = None
        self.job: Job | None = None
        """The item running now (a watchdog and cancellation reach it here)."""
        self.stop_requested = False
        """The next item is cancelled before it starts (set by another thread)."""

    def run(self, request: ExecRequest) -> ExecResult:
        try:
            provider = self.provider_for(request)
        except InvalidRequestError as exc:
            return invalid_request_result(request, exc)
        if self.workspace is None:
            self.workspace = self.scratch.new()
        job = self.job = Job(request, self.workspace, None, None, scratch=True)
        if self.stop_requested:
            job.cancel()
        try:
            return provider.run(job)
        except Exception as exc:  # noqa: BLE001 - one item's failure is its result
            log.exception("a batch item failed on the host")
            return host_error_result(request, exc)

    def finish(self) -> None:
        """Once the result is out: reset the instance for the next item, or leave a workspace
        the item left files in (or did not end cleanly in) for a new one."""
        job, self.job = self.job, None
        if job is None:
            return
        if job.after is not None:
            try:
                job.after()
            except Exception:  # noqa: BLE001 - the next item gets a new instance
                log.exception("resetting an instance after a batch item failed")
        if (job.cancelled or job.left_entries != 0) and self.workspace is not None:
            self.scratch.discard(self.workspace)
            self.workspace = None

    def close(self) -> None:
        if self.workspace is not None:
            self.scratch.discard(self.workspace)
            self.workspace = None


class Lanes(Protocol):
    """How a batch's items run: as worker threads (`ThreadLanes`) or worker processes."""

    def start(self) -> None:
        """Begin (on the event loop's thread)."""

    def fill(self) -> None:
        """Start items from the batch's read-ahead while lanes have room."""

    async def stop(self) -> None:
        """Stop the guests still running and wait for their lanes."""


class Batch:
    """One `run_many` call: read-ahead, lanes, results in completion order."""

    def __init__(self, requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest], concurrency: int,
                 workers: int, make_lanes: Callable[[Batch], Lanes]) -> None:
        self.requests = requests
        self.lane_count = max(1, min(concurrency, workers))
        """More lanes than workers would only queue behind each other."""
        self.make_lanes = make_lanes
        """The Runner decides: worker processes where it has them, else threads."""
        self.room = asyncio.Semaphore(concurrency + self.lane_count)
        """Items read but not yet yielded: the read-ahead keeps every lane fed, and memory flat."""
        self.pending: collections.deque[ExecRequest] = collections.deque()
        self.results: asyncio.Queue[ExecResult | BaseException | None] = asyncio.Queue()
        self.outstanding = 0
        """Items read whose result is not out yet."""
        self.exhausted = False
        self.stopped = False

    async def results_in_completion_order(self) -> AsyncIterator[ExecResult]:
        self.loop = asyncio.get_running_loop()
        self.lanes: Lanes = self.make_lanes(self)
        self.lanes.start()
        feeder = asyncio.create_task(self._feed())
        try:
            while True:
                result = await self.results.get()
                if result is None:
                    return
                if isinstance(result, BaseException):
                    raise result
                self.room.release()
                yield result
        finally:
            self.stopped = True
            feeder.cancel()
            await self.lanes.stop()

    async def _feed(self) -> None:
        try:
            async for request in each_request(self.requests):
                await self.room.acquire()
                self.pending.append(request)
                self.outstanding += 1
                self.lanes.fill()
        except Exception as exc:  # noqa: BLE001 - the consumer gets it
            self.results.put_nowait(exc)
            return
        self.exhausted = True
        self._finish_if_done()

    def deliver(self, result: ExecResult) -> None:
        """A result is out (event loop's thread only)."""
        self.outstanding -= 1
        self.results.put_nowait(result)
        self._finish_if_done()

    def fail(self, exc: BaseException) -> None:
        self.stopped = True
        self.results.put_nowait(exc)

    def _finish_if_done(self) -> None:
        if self.exhausted and self.outstanding == 0:
            self.results.put_nowait(None)


class _ThreadLane(ItemLane):
    abandoned = False
    """The watchdog answered for the lane's item: its thread is stuck in a host call."""


class ThreadLanes:
    """Lanes as jobs on the Runner's workers, each running up to `LANE_ITEMS` items a turn."""

    def __init__(self, batch: Batch, executor: Executor, provider_for: ProviderFor, scratch: ScratchPool) -> None:
        self.batch = batch
        self.executor = executor
        self.provider_for = provider_for
        self.scratch = scratch
        self.running: dict[_ThreadLane, asyncio.Future[Any]] = {}

    def start(self) -> None:
        self.watchdog = asyncio.create_task(self._watch())

    def fill(self) -> None:
        batch = self.batch
        while batch.pending and len(self.running) < batch.lane_count and not batch.stopped:
            self._submit(_ThreadLane(self.provider_for, self.scratch))

    def _submit(self, lane: _ThreadLane) -> None:
        try:
            queued = self.executor.spawn(self._run, lane)
        except RunnerClosedError:
            self.batch.fail(RunnerClosedError("the Runner was closed during the batch"))
            return
        future = asyncio.wrap_future(queued, loop=self.batch.loop)
        self.running[lane] = future
        future.add_done_callback(lambda _: self._ended(lane))

    def _ended(self, lane: _ThreadLane) -> None:
        if self.running.pop(lane, None) is None:
            return  # abandoned by the watchdog: already replaced
        if self.batch.pending and not self.batch.stopped:
            self._submit(lane)  # behind whatever else waits for a worker
            return
        if lane.workspace is not None:
            self.scratch.keep(lane.workspace)
            lane.workspace = None
        self.fill()

    def _run(self, lane: _ThreadLane) -> None:
        batch = self.batch
        for _ in range(LANE_ITEMS):
            if batch.stopped:
                return
            try:
                request = batch.pending.popleft()
            except IndexError:
                return
            result = lane.run(request)
            if lane.abandoned:  # the watchdog answered already; the lane is gone
                lane.close()
                return
            batch.loop.call_soon_threadsafe(batch.deliver, result)
            lane.finish()

    async def _watch(self) -> None:
        """A guest blocked in a host call past its deadline: answer for it, replace its worker."""
        while True:
            await asyncio.sleep(WATCHDOG_POLL_S)
            for lane in list(self.running):
                job = lane.job
                if job is not None and is_overdue(job) and not lane.abandoned:
                    lane.abandoned = True
                    job.cancel()
                    del self.running[lane]
                    self.batch.deliver(self.executor.replace_stuck_worker(job))
                    self.fill()

    async def stop(self) -> None:
        """Stop the guests still running (the consumer went away) and wait for their lanes."""
        self.watchdog.cancel()
        for lane in self.running:
            if lane.job is not None:
                lane.job.cancel()
        futures = list(self.running.values())
        if futures:
            await asyncio.wait(futures)


class RefusingLanes:
    """A batch's lanes where no worker process can start and none may run in this process:
    each item gets a result saying so."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def start(self) -> None:
        pass

    def fill(self) -> None:
        batch = self.batch
        while batch.pending and not batch.stopped:
            batch.deliver(no_worker_result(batch.pending.popleft()))

    async def stop(self) -> None:
        pass


async def each_request(items: Iterable[ExecRequest] | AsyncIterable[ExecRequest]) -> AsyncIterator[ExecRequest]:
    """The requests of a batch, whether the caller gave them as an iterable or an async one."""
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item
