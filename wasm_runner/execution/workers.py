"""Worker processes of a Runner, the parent's side: batch lanes and one-shot runs.

A Runner starts workers on its first batch (and, with `one_shot_workers`, on its first
one-shot run) and keeps them: each is a `python -m wasm_runner.worker`
process, with a Runner of its own (same mounts, a data directory inside the parent's
scratch directory) and one `ItemLane`. Orders (run item N, or cancel item N) and answers
cross the pipes as frames (`pipe`); pipe I/O is done by threads, so any
event loop can use a worker. A batch keeps up to `DEPTH` items in each of its workers,
so that the next one is there when one finishes.

A worker whose guest is stuck in a host call past its deadline answers for the item
itself and exits; a worker that dies loses only the item it was running (its result
says so) and is replaced. Closing a batch kills the workers still running its items:
their guests stop at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

import msgspec

import wasm_runner_protocol
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.execution.containment import Containment
from wasm_runner.execution.executor import WATCHDOG_GRACE_S, WATCHDOG_POLL_S
from wasm_runner.execution.lanes import Batch, Lanes
from wasm_runner.execution.pipe import READY, RETIRED_EXIT_CODE, Answer, Order, read_frame, write_frame
from wasm_runner.execution.results import killed_at_deadline_result, lost_result, no_worker_result
from wasm_runner.guest import Mount
from wasm_runner.packages.settings import PackageSettings
from wasm_runner_protocol.execution import ExecRequest, ExecResult

log = logging.getLogger("wasm_runner")

DEPTH = 2
BACKSTOP_S = 1.0
"""How long after its own watchdog should have answered for an item the supervisor ends a worker."""
"""Items handed to a worker at once: the one it runs and the next."""
PACKAGE_ROOTS = tuple(dict.fromkeys(str(Path(f).resolve().parents[i]) for f, i in
                                    ((__file__, 2), (wasm_runner_protocol.__file__, 1))))
"""Where this copy of the packages sits: a worker finds them there if not otherwise (a script run from elsewhere)."""


# -- the parent's side ----------------------------------------------------------------


class Worker:
    """One worker process, seen from the parent: orders out, answers in (on a reader thread)."""

    def __init__(self, scratch_dir: Path, mounts: tuple[Mount, ...], containment: Containment | None = None,
                 egress: EgressSettings | None = None, packages: PackageSettings | None = None,
                 **options: object) -> None:
        """`containment` puts a memory ceiling on the process; `egress` and `packages` are the
        Runner's settings its providers use; `options` go to the worker's configuration
        (`worker_main`: e.g. kernel hosting)."""
        self.data_dir = scratch_dir / f"worker-{uuid.uuid4().hex}"
        self.epoch_free = bool(options.get("epoch_free"))
        """Its guests run without epoch checks: a stop ends the process (it answers first)."""
        config = {"data_dir": str(self.data_dir), "mounts": [m.to_config() for m in mounts],
                  "egress": egress.to_config() if egress is not None else None,
                  "packages": packages.to_config() if packages is not None else None, **options}
        # The parent's own way to the package comes first (inherited environment and working
        # directory); its location is the fallback.
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), *PACKAGE_ROOTS) if p)
        # Its own process group: a terminal's Ctrl-C reaches the parent, which decides.
        self.proc = subprocess.Popen([sys.executable, "-m", "wasm_runner.worker", json.dumps(config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, process_group=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both piped
        self._orders_out: IO[bytes] = self.proc.stdin
        self._answers_in: IO[bytes] = self.proc.stdout
        self.cgroup = containment.apply(self.proc.pid) if containment is not None else None
        self.ready = threading.Event()
        self.ready_at: float | None = None
        self.in_flight: dict[int, ExecRequest] = {}
        """Items sent and not answered, oldest (the one running) first."""
        self._seq = 0
        self._sent_at: dict[int, float] = {}
        self._answered_at = 0.0
        self.overdue: int | None = None
        """The item past its deadline and grace when the supervisor ended the worker (a timeout, not a loss)."""
        self.on_result: Callable[[Worker, int, ExecResult], None] | None = None
        self.on_exit: Callable[[Worker], None] | None = None
        """Set by the user of the worker (a batch, or the one-shot runs); called on the reader thread."""
        self.on_answer: Callable[[Worker, Answer], None] | None = None
        """Takes every answer instead of `on_result` (kernel hosting: chunks and notices too)."""
        self.exited = threading.Event()
        self.lock = threading.Lock()
        self._decode = msgspec.msgpack.Decoder(Answer).decode
        self._encode = msgspec.msgpack.Encoder().encode
        self._write_lock = threading.Lock()
        threading.Thread(target=self._read, name="wasm-worker-reader", daemon=True).start()

    def send(self, request: ExecRequest) -> int:
        self._seq += 1
        self._sent_at[self._seq] = time.monotonic()
        self.in_flight[self._seq] = request
        self._order(Order(self._seq, request))
        return self._seq

    def cancel(self, seq: int) -> None:
        """Stop item `seq` (its answer still comes, and is dropped)."""
        self._order(Order(seq))

    def order(self, order: Order) -> None:
        """Send any order (kernel hosting numbers its own)."""
        self._order(order)

    def _order(self, order: Order) -> None:
        try:
            with self._write_lock:  # the worker reads eagerly: no wait
                write_frame(self._orders_out, self._encode(order))
        except (OSError, ValueError):  # it died: its reader reports the exit
            pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def _read(self) -> None:
        try:
            first = read_frame(self._answers_in)
            if first is not None:
                if first != READY:
                    raise ValueError(f"its first frame is not {READY!r}")
                self.ready_at = time.monotonic()
                self.ready.set()
                while (frame := read_frame(self._answers_in)) is not None:
                    answer = self._decode(frame)
                    if answer.result is not None:
                        self._answered_at = time.monotonic()
                        self._sent_at.pop(answer.seq, None)
                    if self.on_answer is not None:
                        self.on_answer(self, answer)
                    elif self.on_result is not None and answer.result is not None:
                        self.on_result(self, answer.seq, answer.result)
        except Exception:
            # Nobody else reads its answers: a worker this thread cannot follow any more is
            # ended, so that its calls get a result (lost) instead of waiting forever.
            log.exception("the answers of worker process %d could not be read; ending it", self.proc.pid)
            self.kill()
        finally:
            self.proc.wait()
            shutil.rmtree(self.data_dir, ignore_errors=True)
            if self.cgroup is not None:
                self.cgroup.remove()
            with self.lock:  # either this thread sees on_exit, or `watch` sees exited
                self.exited.set()
                on_exit = self.on_exit
            if on_exit is not None:
                on_exit(self)

    def running_overdue(self, now: float) -> int | None:
        """The item it runs (the oldest unanswered; it runs items in turn), if past its deadline,
        the worker's own watchdog's grace and `BACKSTOP_S`: the worker failed to answer for it.
        Not before its first answer: its first item may compile a runtime, before the guest's clock
        starts (its own watchdog still answers for it)."""
        if self.ready_at is None or not self._answered_at:
            return None
        try:
            seq, request = next(iter(self.in_flight.items()))
        except (StopIteration, RuntimeError):  # none, or changed meanwhile: the next look decides
            return None
        started = max(self._sent_at.get(seq, now), self._answered_at, self.ready_at)
        limit = request.limits.timeout_s + WATCHDOG_GRACE_S + BACKSTOP_S
        return seq if now - started > limit else None

    def watch(self, on_result: Callable[[Worker, int, ExecResult], None] | None,
              on_exit: Callable[[Worker], None] | None) -> bool:
        """Report results and the exit to these callbacks; False if it has exited already."""
        with self.lock:
            self.on_result, self.on_exit = on_result, on_exit
            return not self.exited.is_set()


class WorkerPool:
    """A Runner's worker processes; each serves one batch, or the one-shot runs, at a time."""

    def __init__(self, scratch_dir: Path, mounts: tuple[Mount, ...], containment: Containment | None = None,
                 egress: EgressSettings | None = None, packages: PackageSettings | None = None) -> None:
        self.scratch_dir = scratch_dir
        self.mounts = mounts
        self.containment = containment
        self.egress = egress
        self.packages = packages
        """The Runner's package settings, for the native sandboxes the workers start."""
        self.idle: list[Worker] = []
        self.lent: set[Worker] = set()
        """Workers a batch is using."""
        self.lock = threading.Lock()
        self.broken = False
        """A worker could not start: batches run their lanes as threads."""
        self.closed = False
        self._supervising = False

    def _supervise(self) -> None:
        """End workers that left an item unanswered past its deadline and grace: their own
        supervisor (worker_main) answers and exits first, unless the process cannot (stopped, hung)."""
        while not self.closed:
            time.sleep(WATCHDOG_POLL_S)
            now = time.monotonic()
            with self.lock:
                workers = list(self.lent)
            for worker in workers:
                seq = worker.running_overdue(now)
                if seq is not None and worker.proc.poll() is None:
                    log.warning("worker process %d left an item unanswered past its deadline; ending it", worker.proc.pid)
                    worker.overdue = seq
                    worker.kill()

    def take(self, count: int) -> list[Worker]:
        with self.lock:
            alive = [w for w in self.idle if not w.exited.is_set()]
            taken, self.idle = alive[:count], alive[count:]
        # Their guests run without epoch checks: the worker's supervisor ends the process at
        # a guest's deadline or stop, and the Runner starts another (decision 0011).
        taken += [Worker(self.scratch_dir, self.mounts, self.containment, self.egress, self.packages, epoch_free=True)
                  for _ in range(count - len(taken))]
        with self.lock:
            self.lent.update(taken)
            start, self._supervising = not self._supervising, True
        if start:
            threading.Thread(target=self._supervise, name="wasm-worker-supervisor", daemon=True).start()
        return taken

    def give_back(self, worker: Worker) -> None:
        with self.lock:
            self.lent.discard(worker)
            if worker.proc.poll() is None and not worker.in_flight:
                worker.watch(None, None)
                self.idle.append(worker)
                return
        worker.kill()

    def close(self) -> None:
        """Kill every worker, idle or in use (a batch's, or the one-shot runs')."""
        with self.lock:
            self.closed = True
            workers, self.idle = self.idle + list(self.lent), []
        for worker in workers:
            worker.kill()


class ProcessLanes:
    """A batch's lanes, one per worker process; `fallback` makes the lanes that take over when
    no worker can start."""

    def __init__(self, batch: Batch, pool: WorkerPool, fallback: Callable[[Batch], Lanes]) -> None:
        self.batch = batch
        self.pool = pool
        self.fallback = fallback
        self.workers: list[Worker] = []
        self.starting: list[Worker] = []

    def start(self) -> None:
        for worker in self.pool.take(self.batch.lane_count):
            self._adopt(worker)

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        _call_soon(self.batch.loop, callback, *args)

    def _adopt(self, worker: Worker) -> None:
        alive = worker.watch(lambda w, seq, result: self._post(self._result, w, seq, result),
                             lambda w: self._post(self._exited, w))
        if not alive and worker.ready.is_set():  # it died since it was idle: another one
            self.pool.lent.discard(worker)
            self._adopt(self.pool.take(1)[0])
        elif not alive:
            self.starting.append(worker)
            self._exited(worker)
        elif worker.ready.is_set():
            self.workers.append(worker)
        else:
            self.starting.append(worker)
            threading.Thread(target=self._await_ready, args=(worker,), daemon=True).start()

    def _await_ready(self, worker: Worker) -> None:
        while not worker.ready.wait(0.1):
            if worker.exited.is_set():
                return
        self._post(self._ready, worker)

    def _ready(self, worker: Worker) -> None:
        if worker in self.starting:  # else given back already, at the batch's end
            self.starting.remove(worker)
            self.workers.append(worker)
            self.fill()

    def fill(self) -> None:
        batch = self.batch
        while batch.pending and self.workers and not batch.stopped:
            worker = min(self.workers, key=lambda w: len(w.in_flight))  # spread: a short batch runs in parallel
            if len(worker.in_flight) >= DEPTH:
                return
            worker.send(batch.pending.popleft())

    def _result(self, worker: Worker, seq: int, result: ExecResult) -> None:
        if worker.in_flight.pop(seq, None) is not None:
            self.batch.deliver(result)
            self.fill()

    def _exited(self, worker: Worker) -> None:
        """A worker ended: the item it ran is lost (its result says so), the ones after it
        go back to the read-ahead, and a new worker takes its place."""
        batch = self.batch
        self.pool.lent.discard(worker)
        if worker in self.workers:
            self.workers.remove(worker)
        elif worker in self.starting:  # it could not start: no worker will
            self.starting.remove(worker)
            if self.pool.closed:  # killed by the Runner's close, not a failure to start
                return
            log.error("a batch worker could not start (exit code %s); batches run in threads",
                      worker.proc.returncode)
            self.pool.broken = True
            if not self.workers and batch.lanes is self:
                self._fall_back_to_threads()
            return
        if worker.in_flight:
            # A worker that retired after answering for its stopped guest started none of them.
            (head, lost), *rest = worker.in_flight.items()
            after = [request for _, request in rest]
            if worker.proc.returncode == RETIRED_EXIT_CODE:
                after.insert(0, lost)
            elif not batch.stopped:
                batch.deliver(ended_result(worker, head, lost))
            batch.pending.extendleft(reversed(after))
            worker.in_flight.clear()
        if not batch.stopped:
            self._adopt(self.pool.take(1)[0])

    def _fall_back_to_threads(self) -> None:
        self.batch.lanes = self.fallback(self.batch)
        self.batch.lanes.start()
        self.batch.lanes.fill()

    async def stop(self) -> None:
        """Give idle workers back; kill the ones still running this batch's items."""
        for worker in self.starting:
            self.pool.give_back(worker)
        self.starting = []
        for worker in self.workers:
            if worker.in_flight:
                worker.kill()
            else:
                self.pool.give_back(worker)
        busy = [w for w in self.workers if w.in_flight]
        self.workers = []
        for worker in busy:
            await asyncio.to_thread(worker.exited.wait, 5)


class OneShotWorkers:
    """Worker processes for a Runner's one-shot runs: the calling process keeps only its event
    loop and bookkeeping, and guests on several cores do not contend with it for one
    interpreter. Workers start as runs need them, up to `count`: one more each time a run
    finds none idle. A run that finds none up yet waits for one (`wait`), or is left to the
    caller (None: an in-process Runner runs it itself meanwhile)."""

    def __init__(self, pool: WorkerPool, count: int) -> None:
        self.pool = pool
        self.count = count
        self.workers: list[Worker] = []
        self.waiting: dict[tuple[Worker, int], concurrent.futures.Future[ExecResult]] = {}
        self.lock = threading.Lock()

    def submit(self, request: ExecRequest, wait: bool) -> tuple[Worker, int, concurrent.futures.Future[ExecResult]] | None:
        """Send the run to a worker: the one with the fewest runs among those up (or among those
        starting, with `wait`); None when the caller must run it elsewhere."""
        future: concurrent.futures.Future[ExecResult] = concurrent.futures.Future()
        with self.lock:
            sent = self._send(request, future, wait)
        if sent is None:
            return None
        return (*sent, future)

    def _send(self, request: ExecRequest, future: concurrent.futures.Future[ExecResult],
              wait: bool) -> tuple[Worker, int] | None:
        """(lock held)"""
        if self.pool.broken or self.pool.closed:
            return None
        ready = [w for w in self.workers if w.ready.is_set()]
        if len(self.workers) < self.count and not any(not w.in_flight for w in ready):
            for worker in self.pool.take(1):  # for this run if none is up, else for the next ones
                if worker.watch(self._result, self._exited):
                    self.workers.append(worker)
        candidates = ready or (self.workers if wait else [])
        if not candidates:
            return None
        worker = min(candidates, key=lambda w: len(w.in_flight))
        seq = worker.send(request)
        self.waiting[(worker, seq)] = future
        return worker, seq

    async def run(self, request: ExecRequest, wait: bool = False) -> ExecResult | None:
        """The result, or None when the caller runs it itself (see `submit`)."""
        sent = self.submit(request, wait)
        if sent is None:
            return None
        worker, seq, future = sent
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            worker.cancel(seq)
            raise

    def run_blocking(self, request: ExecRequest, wait: bool = False) -> ExecResult | None:
        sent = self.submit(request, wait)
        return sent[2].result() if sent is not None else None

    def _result(self, worker: Worker, seq: int, result: ExecResult) -> None:
        with self.lock:
            worker.in_flight.pop(seq, None)
            future = self.waiting.pop((worker, seq), None)
        if future is not None and not future.done():
            future.set_result(result)

    def _exited(self, worker: Worker) -> None:
        """A worker ended: the run it was running is lost (its result says so); the ones queued
        behind it never started, and go to another worker."""
        if not worker.ready.is_set() and not self.pool.closed:  # not one the pool's closing killed
            log.error("a worker process could not start (exit code %s); one-shot runs cannot run on one",
                      worker.proc.returncode)
            self.pool.broken = True
        lost: list[tuple[concurrent.futures.Future[ExecResult] | None, int, ExecRequest]] = []
        with self.lock:
            if worker in self.workers:
                self.workers.remove(worker)
            self.pool.lent.discard(worker)
            # A worker that retired after answering for its stuck guest started none of them.
            started = 0 if worker.proc.returncode == RETIRED_EXIT_CODE else 1
            for i, (seq, request) in enumerate(worker.in_flight.items()):
                future = self.waiting.pop((worker, seq), None)
                if i >= started and future is not None and self._send(request, future, wait=True) is not None:
                    continue
                lost.append((future, seq, request))
            worker.in_flight.clear()
        for future, seq, request in lost:
            if future is not None and not future.done():
                started = worker.ready.is_set()
                future.set_result(ended_result(worker, seq, request) if started else no_worker_result(request))


def ended_result(worker: Worker, seq: int, request: ExecRequest) -> ExecResult:
    """The result of item `seq`, which a worker was running when it ended: a timeout if the
    supervisor ended it past the item's deadline, else lost (it may be run again)."""
    if worker.overdue == seq:
        return killed_at_deadline_result(request)
    return lost_result(request, worker.proc.returncode)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
    """Run `callback` on `loop` (from a pipe thread); not once the loop is closed: nobody waits then."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass
