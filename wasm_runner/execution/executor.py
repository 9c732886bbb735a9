"""The Runner's worker threads and their watchdog.

Guests run on worker threads (wasmtime releases the GIL), so waiting for one never
blocks the event loop. A guest blocked inside a host call past its deadline is answered
for by the watchdog, and its worker is given up and replaced so that capacity stays.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from wasm_runner.errors import RunnerClosedError
from wasm_runner.execution.results import stuck_result
from wasm_runner.providers.base import Job, Provider
from wasm_runner_protocol.execution import ExecResult

__all__ = ["WATCHDOG_GRACE_S", "WATCHDOG_POLL_S", "Executor", "is_overdue"]

log = logging.getLogger("wasm_runner")

WATCHDOG_GRACE_S = 2.0
"""How long past its deadline a guest may take to return before its worker is abandoned."""
WATCHDOG_POLL_S = 0.25

T = TypeVar("T")


def is_overdue(job: Job) -> bool:
    """The job's guest is past its deadline and the grace after it."""
    return job.started_at is not None and time.monotonic() - job.started_at > job.request.limits.timeout_s + WATCHDOG_GRACE_S


class Executor:
    """Worker threads that run jobs, with a watchdog on each wait."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.abandoned_workers = 0
        """Workers given up because their guest was stuck in a host call."""
        self.on_stuck: Callable[[Job], None] | None = None
        """Told of each job given up (a worker process retires then: its thread is never left behind)."""
        self._pool = self._new_pool()
        self._lock = threading.Lock()
        self._undelivered = 0
        """Jobs submitted whose results are not out yet (queued or running)."""

    def _new_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        return concurrent.futures.ThreadPoolExecutor(self.concurrency, thread_name_prefix="wasm-guest")

    def spawn(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Run `fn(*args)` on a worker (behind whatever is queued). Raises RunnerClosedError once closed."""
        with self._lock:
            try:
                return self._pool.submit(fn, *args)
            except RuntimeError:
                raise RunnerClosedError("the Runner was closed") from None

    def submit(self, job: Job, provider: Provider, lock: threading.Lock | None = None) -> concurrent.futures.Future[ExecResult]:
        """Queue the job on a worker (holding `lock` while it runs: a session's one execution at a
        time); the future is done as soon as the result is. Then, while other jobs are queued or
        running, the same worker does the provider's follow-up work (`job.after`: resetting the
        instance) itself: handing it to another thread cost throughput. When nothing else waits,
        the provider's own thread does it: a worker doing it made spaced-out runs slower."""
        delivered: concurrent.futures.Future[ExecResult] = concurrent.futures.Future()
        holding = lock if lock is not None else contextlib.nullcontext()

        def work() -> None:
            try:
                if not delivered.set_running_or_notify_cancel():
                    return  # cancelled while queued
                try:
                    with holding:
                        result = provider.run(job)
                except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                    delivered.set_exception(exc)
                    return
            finally:
                with self._lock:
                    self._undelivered -= 1
                    others = self._undelivered
            delivered.set_result(result)
            if job.after is not None and others:
                try:
                    job.after()
                except Exception:  # noqa: BLE001 - the result is out; the worker must go on
                    log.exception("follow-up work of an execution failed")

        def never_ran(queued: concurrent.futures.Future[None]) -> None:
            if queued.cancelled():  # the executor shut down first
                with self._lock:
                    self._undelivered -= 1
                delivered.cancel()

        with self._lock:
            try:
                queued = self._pool.submit(work)
            except RuntimeError:
                raise RunnerClosedError("the Runner was closed") from None
            self._undelivered += 1
        queued.add_done_callback(never_ran)
        return delivered

    def run_blocking(self, job: Job, provider: Provider, lock: threading.Lock | None = None,
                     on_abandon: Callable[[], None] | None = None) -> ExecResult:
        """Run the job and wait for its result on this thread."""
        future = self.submit(job, provider, lock)
        while True:
            try:
                return future.result(timeout=WATCHDOG_POLL_S)
            except concurrent.futures.TimeoutError:
                if is_overdue(job):
                    return self._abandon(job, future, on_abandon)

    async def run_async(self, job: Job, provider: Provider, lock: threading.Lock | None = None,
                        on_abandon: Callable[[], None] | None = None) -> ExecResult:
        """Run the job and await its result; cancelling the caller stops its guest."""
        future = asyncio.wrap_future(self.submit(job, provider, lock))
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=WATCHDOG_POLL_S)
                if done:
                    return future.result()
                if is_overdue(job):
                    return self._abandon(job, future, on_abandon)
        except asyncio.CancelledError:
            job.cancel()  # the caller went away: stop its guest
            raise

    def _abandon(self, job: Job, future: concurrent.futures.Future[ExecResult] | asyncio.Future[ExecResult],
                 on_abandon: Callable[[], None] | None) -> ExecResult:
        """A guest blocked inside a host call past its deadline: answer now, leave its thread behind.

        The guest runtimes bound their blocking calls by the deadline, so this is the last line
        of defence. `on_abandon` lets the owner of the job drop what the stuck thread holds."""
        job.cancel()
        if future.done():
            return future.result()
        result = self.replace_stuck_worker(job)
        if on_abandon is not None:
            on_abandon()
        return result

    def replace_stuck_worker(self, job: Job) -> ExecResult:
        """Replace the worker stuck with this (cancelled) job, and answer for it."""
        with self._lock:
            self.abandoned_workers += 1
            old, self._pool = self._pool, self._new_pool()
        old.shutdown(wait=False)
        log.warning("abandoned a worker blocked in a host call (total %d)", self.abandoned_workers)
        printed = ("", "")
        if job.printed is not None:
            try:
                printed = job.printed()
            except Exception:  # noqa: BLE001 - the answer goes out without it
                log.warning("could not read what a stuck guest printed", exc_info=True)
        if self.on_stuck is not None:
            self.on_stuck(job)
        return stuck_result(job.request, *printed)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
