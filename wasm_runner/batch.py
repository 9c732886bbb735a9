"""`Runner.run_many`: lanes of workers that run batch items back to back.

A lane is a worker thread with a scratch workspace of its own. It takes the next
item from the batch's read-ahead, runs it one-shot in the instance kept for its
workspace, hands the result to the event loop, resets the instance, and goes on;
the event loop only reads requests ahead and passes results on. Going through
`Runner.run` per item (a task, a future and two thread hand-offs each) cost a
third of the CPU a check takes, and left workers waiting for the loop.

A lane gives its worker back after `LANE_ITEMS` items and is queued again behind
whatever else waits for a worker (a session's call), so a batch shares the Runner.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import TYPE_CHECKING

from .api import ExecRequest, ExecResult, GuestError
from .providers.base import Job
from .workspace import Workspace

if TYPE_CHECKING:
    from .runner import Runner

log = logging.getLogger("wasm_runner")

LANE_ITEMS = 32
"""Items a lane runs before its worker serves whatever else is queued (about 0.1 s of checks)."""


class _Lane:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace: Workspace | None = workspace
        self.job: Job | None = None
        """The item running now (the watchdog and cancellation reach it here)."""
        self.abandoned = False
        """The watchdog answered for the lane's item: the lane's thread is stuck in a host call."""


class Batch:
    """One `run_many` call: read-ahead, lanes, results in completion order."""

    def __init__(self, runner: "Runner", requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest],
                 concurrency: int) -> None:
        self.runner = runner
        self.requests = requests
        self.lanes_wanted = max(1, min(concurrency, runner.concurrency))
        """More lanes than workers would only queue behind each other."""
        self.room = asyncio.Semaphore(concurrency + self.lanes_wanted)
        """Items read but not yet yielded: the read-ahead keeps every lane fed, and memory flat."""
        self.pending: collections.deque[ExecRequest] = collections.deque()
        self.results: asyncio.Queue[ExecResult | BaseException | None] = asyncio.Queue()
        self.running: dict[_Lane, asyncio.Future] = {}
        self.outstanding = 0
        """Items read whose result is not out yet."""
        self.exhausted = False
        self.stopped = False

    async def results_in_completion_order(self) -> AsyncIterator[ExecResult]:
        self.loop = asyncio.get_running_loop()
        feeder = asyncio.create_task(self._feed())
        watchdog = asyncio.create_task(self._watch())
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
            watchdog.cancel()
            await self._stop_lanes()

    # -- the event loop's side ---------------------------------------------------------

    async def _feed(self) -> None:
        try:
            async for request in _aiter(self.requests):
                await self.room.acquire()
                self.pending.append(request)
                self.outstanding += 1
                self._start_lanes()
        except Exception as exc:  # noqa: BLE001 - the consumer gets it
            self.results.put_nowait(exc)
            return
        self.exhausted = True
        self._finish_if_done()

    def _start_lanes(self) -> None:
        while self.pending and len(self.running) < self.lanes_wanted and not self.stopped:
            lane = _Lane(self.runner._scratch_workspace(self.pending[0]))
            self._submit(lane)

    def _submit(self, lane: _Lane) -> None:
        try:
            queued = self.runner._executor.submit(self._run_lane, lane)
        except RuntimeError:  # the Runner was closed
            self.results.put_nowait(RuntimeError("the Runner was closed during the batch"))
            self.stopped = True
            return
        future = asyncio.wrap_future(queued, loop=self.loop)
        self.running[lane] = future
        future.add_done_callback(lambda _: self._lane_ended(lane))

    def _lane_ended(self, lane: _Lane) -> None:
        if self.running.get(lane) is None:
            return  # abandoned by the watchdog: already replaced
        del self.running[lane]
        if self.pending and not self.stopped:
            self._submit(lane)  # behind whatever else waits for a worker
        else:
            self._release(lane)
            self._start_lanes()

    def _release(self, lane: _Lane) -> None:
        if lane.workspace is not None:
            self.runner._keep_scratch(lane.workspace)
            lane.workspace = None

    def _deliver(self, result: ExecResult) -> None:
        self.outstanding -= 1
        self.results.put_nowait(result)
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self.exhausted and self.outstanding == 0:
            self.results.put_nowait(None)

    async def _watch(self) -> None:
        """A guest blocked in a host call past its deadline: answer for it, replace its worker."""
        from .runner import WATCHDOG_POLL_S, _overdue

        while True:
            await asyncio.sleep(WATCHDOG_POLL_S)
            for lane in list(self.running):
                job = lane.job
                if job is not None and _overdue(job) and not lane.abandoned:
                    lane.abandoned = True
                    job.cancel()
                    del self.running[lane]
                    self._deliver(self.runner._abandoned(job))
                    self._start_lanes()

    async def _stop_lanes(self) -> None:
        """Stop the guests still running (the consumer went away) and wait for their lanes."""
        for lane in self.running:
            if lane.job is not None:
                lane.job.cancel()
        futures = list(self.running.values())
        if futures:
            await asyncio.wait(futures)

    # -- a worker's side ----------------------------------------------------------------

    def _run_lane(self, lane: _Lane) -> None:
        for _ in range(LANE_ITEMS):
            if self.stopped:
                return
            try:
                request = self.pending.popleft()
            except IndexError:
                return
            if lane.workspace is None:
                lane.workspace = self.runner._new_scratch()
            job = Job(request, lane.workspace, None, None, scratch=True)
            lane.job = job
            result = self._execute(job)
            lane.job = None
            if lane.abandoned:  # the watchdog answered already; the lane is gone
                self.runner._discard_scratch(lane.workspace)
                return
            self.loop.call_soon_threadsafe(self._deliver, result)
            if job.after is not None:
                try:
                    job.after()  # reset the instance for the lane's next item
                except Exception:  # noqa: BLE001 - the next item gets a new instance
                    log.exception("follow-up work of a batch item failed")
            if job.cancelled or job.left_entries != 0:  # the workspace is not clean: a new one
                self.runner._discard_scratch(lane.workspace)
                lane.workspace = None

    def _execute(self, job: Job) -> ExecResult:
        request = job.request
        try:
            provider = self.runner.provider_for(request)
        except ValueError as exc:
            return ExecResult(exit_code=2, id=request.id, language=request.language,
                              error=GuestError(type="InvalidRequest", message=str(exc)))
        try:
            return provider.execute(job)
        except Exception as exc:  # noqa: BLE001 - one item's failure is its result
            log.exception("a batch item failed on the host")
            return ExecResult(exit_code=1, id=request.id, language=request.language,
                              error=GuestError(type="HostError", message=f"the item could not run: {exc}"))


async def _aiter(items: Iterable[ExecRequest] | AsyncIterable[ExecRequest]) -> AsyncIterator[ExecRequest]:
    if hasattr(items, "__aiter__"):
        async for item in items:  # type: ignore[union-attr]
            yield item
    else:
        for item in items:  # type: ignore[union-attr]
            yield item
