"""Worker processes of a Runner, both ends of their pipes: batch lanes and one-shot runs.

A Runner starts workers on its first batch (and, with `one_shot_workers`, on its first
one-shot run) and keeps them: each is a `python -c` process running this module's
`main`, with a Runner of its own (same mounts, a data directory inside the parent's
scratch directory) and one `ItemLane`. Orders (run item N, or cancel item N) and answers
cross the pipes as length-prefixed msgpack frames; pipe I/O is done by threads, so any
event loop can use a worker. A batch keeps up to `DEPTH` items in each of its workers,
so that the next one is there when one finishes.

A worker whose guest is stuck in a host call past its deadline answers for the item
itself and exits; a worker that dies loses only the item it was running (its result
says so) and is replaced. Closing a batch kills the workers still running its items:
their guests stop at once.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import queue
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable

import msgspec

from wasm_runner_protocol.execution import ExecRequest, ExecResult, GuestError

if TYPE_CHECKING:
    from wasm_runner.execution.lanes import Batch
    from wasm_runner.runner import Runner

log = logging.getLogger("wasm_runner")

DEPTH = 2
"""Items handed to a worker at once: the one it runs and the next."""
_HEADER = struct.Struct("<I")
_READY = b"ready"


class _Order(msgspec.Struct, array_like=True):
    """Parent to worker: run `request` as item `seq`, or (no request) cancel item `seq`."""

    seq: int
    request: ExecRequest | None = None


class _Answer(msgspec.Struct, array_like=True):
    seq: int
    result: ExecResult


def _write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None


# -- the parent's side ----------------------------------------------------------------


class Worker:
    """One worker process, seen from the parent: orders out, answers in (on a reader thread)."""

    def __init__(self, runner: "Runner") -> None:
        self.data_dir = runner.scratch_dir / f"worker-{uuid.uuid4().hex}"
        config = {"data_dir": str(self.data_dir),
                  "mounts": [{"host": str(m.host), "guest": m.guest, "writable": m.writable} for m in runner.mounts]}
        # The parent's own way to the package comes first (inherited environment and working
        # directory); its location is the fallback (a script run from elsewhere).
        start = (f"import sys; sys.path.append({str(Path(__file__).resolve().parents[2])!r}); "
                 "from wasm_runner.execution.workers import main; main()")
        self.proc = subprocess.Popen([sys.executable, "-c", start, json.dumps(config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ready = threading.Event()
        self.in_flight: dict[int, ExecRequest] = {}
        """Items sent and not answered, oldest (the one running) first."""
        self._seq = 0
        self.on_result: Callable[["Worker", int, ExecResult], None] | None = None
        self.on_exit: Callable[["Worker"], None] | None = None
        """Set by the user of the worker (a batch, or the one-shot runs); called on the reader thread."""
        self.exited = threading.Event()
        self.lock = threading.Lock()
        self._decode = msgspec.msgpack.Decoder(_Answer).decode
        self._encode = msgspec.msgpack.Encoder().encode
        self._write_lock = threading.Lock()
        threading.Thread(target=self._read, name="wasm-worker-reader", daemon=True).start()

    def send(self, request: ExecRequest) -> int:
        self._seq += 1
        self.in_flight[self._seq] = request
        self._order(_Order(self._seq, request))
        return self._seq

    def cancel(self, seq: int) -> None:
        """Stop item `seq` (its answer still comes, and is dropped)."""
        self._order(_Order(seq))

    def _order(self, order: _Order) -> None:
        try:
            with self._write_lock:  # the worker reads eagerly: no wait
                _write_frame(self.proc.stdin, self._encode(order))
        except (OSError, ValueError):  # it died: its reader reports the exit
            pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def _read(self) -> None:
        try:
            if _read_frame(self.proc.stdout) == _READY:
                self.ready.set()
                while (frame := _read_frame(self.proc.stdout)) is not None:
                    answer = self._decode(frame)
                    if self.on_result is not None:
                        self.on_result(self, answer.seq, answer.result)
        finally:
            self.proc.wait()
            shutil.rmtree(self.data_dir, ignore_errors=True)
            with self.lock:  # either this thread sees on_exit, or `watch` sees exited
                self.exited.set()
                on_exit = self.on_exit
            if on_exit is not None:
                on_exit(self)

    def watch(self, on_result: Callable[["Worker", int, ExecResult], None] | None,
              on_exit: Callable[["Worker"], None] | None) -> bool:
        """Report results and the exit to these callbacks; False if it has exited already."""
        with self.lock:
            self.on_result, self.on_exit = on_result, on_exit
            return not self.exited.is_set()


class WorkerPool:
    """A Runner's worker processes; each serves one batch, or the one-shot runs, at a time."""

    def __init__(self, runner: "Runner") -> None:
        self.runner = runner
        self.idle: list[Worker] = []
        self.lent: set[Worker] = set()
        """Workers a batch is using."""
        self.lock = threading.Lock()
        self.broken = False
        """A worker could not start: batches run their lanes as threads."""

    def take(self, count: int) -> list[Worker]:
        with self.lock:
            alive = [w for w in self.idle if not w.exited.is_set()]
            taken, self.idle = alive[:count], alive[count:]
        taken += [Worker(self.runner) for _ in range(count - len(taken))]
        with self.lock:
            self.lent.update(taken)
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
            workers, self.idle = self.idle + list(self.lent), []
        for worker in workers:
            worker.kill()


class ProcessLanes:
    """A batch's lanes, one per worker process."""

    def __init__(self, batch: "Batch", pool: WorkerPool) -> None:
        self.batch = batch
        self.pool = pool
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
            log.error("a batch worker could not start (exit code %s); batches run in threads",
                      worker.proc.returncode)
            self.pool.broken = True
            if not self.workers and batch.lanes is self:
                self._fall_back_to_threads()
            return
        if worker.in_flight:
            lost, *after = worker.in_flight.values()
            if not batch.stopped:
                batch.deliver(_lost(lost, worker.proc.returncode))
            batch.pending.extendleft(reversed(after))
            worker.in_flight.clear()
        if not batch.stopped:
            self._adopt(self.pool.take(1)[0])

    def _fall_back_to_threads(self) -> None:
        from wasm_runner.execution.lanes import ThreadLanes

        self.batch.lanes = ThreadLanes(self.batch)
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
    """Worker processes for a Runner's one-shot runs (opt-in, see `Runner`): the calling
    process keeps only its event loop and bookkeeping, and guests on several cores do not
    contend with it for one interpreter. Until its workers are up, and for runs that
    stream their output, the Runner runs in-process."""

    def __init__(self, pool: WorkerPool, count: int) -> None:
        self.pool = pool
        self.count = count
        self.workers: list[Worker] = []
        self.waiting: dict[tuple[Worker, int], asyncio.Future[ExecResult]] = {}
        self.lock = threading.Lock()

    async def run(self, request: ExecRequest) -> ExecResult | None:
        """The result, or None when no worker is ready (the caller runs it itself)."""
        with self.lock:
            if self.pool.broken:
                return None
            if len(self.workers) < self.count:
                for worker in self.pool.take(self.count - len(self.workers)):
                    if worker.watch(self._result, self._exited):
                        self.workers.append(worker)
            ready = [w for w in self.workers if w.ready.is_set()]
            if not ready:
                return None
            worker = min(ready, key=lambda w: len(w.in_flight))
            future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
            seq = worker.send(request)
            self.waiting[(worker, seq)] = future
        try:
            return await future
        except asyncio.CancelledError:
            worker.cancel(seq)
            raise

    def _result(self, worker: Worker, seq: int, result: ExecResult) -> None:
        with self.lock:
            worker.in_flight.pop(seq, None)
            future = self.waiting.pop((worker, seq), None)
        if future is not None:
            _settle(future, result)

    def _exited(self, worker: Worker) -> None:
        if not worker.ready.is_set():
            log.error("a worker process could not start (exit code %s); one-shot runs stay in-process",
                      worker.proc.returncode)
            self.pool.broken = True
        with self.lock:
            if worker in self.workers:
                self.workers.remove(worker)
            self.pool.lent.discard(worker)
            lost = [(self.waiting.pop((worker, seq), None), request) for seq, request in worker.in_flight.items()]
            worker.in_flight.clear()
        for future, request in lost:
            if future is not None:
                _settle(future, _lost(request, worker.proc.returncode))


def _settle(future: asyncio.Future[ExecResult], result: ExecResult) -> None:
    """Give a waiting run its result, from a pipe thread (not once it is cancelled)."""
    def settle() -> None:
        if not future.done():
            future.set_result(result)
    _call_soon(future.get_loop(), settle)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
    """Run `callback` on `loop` (from a pipe thread); not once the loop is closed: nobody waits then."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass


def _lost(request: ExecRequest, exit_code: int | None) -> ExecResult:
    return ExecResult(exit_code=1, id=request.id, language=request.language, error=GuestError(
        type="HostError", message=f"the worker process running this exited (code {exit_code}); "
                                  "it did not finish: run it again"))


# -- the worker's side ----------------------------------------------------------------


def main() -> None:
    from wasm_runner.execution.lanes import ItemLane
    from wasm_runner.providers.wasm.sandbox import Mount
    from wasm_runner.runner import WATCHDOG_POLL_S, Runner, _overdue

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent decides
    config = json.loads(sys.argv[1])
    mounts = tuple(Mount(Path(m["host"]), m["guest"], m["writable"]) for m in config["mounts"])
    # The pipes carry frames only: nothing else in the process (a print, a library, a
    # native sandbox) may read or write them as its standard streams.
    source, out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    orders: queue.SimpleQueue[_Order | None] = queue.SimpleQueue()
    write_lock = threading.Lock()
    running = [0, False]
    """The item running now, and whether it was answered (the watchdog may answer for it)."""
    cancelled: set[int] = set()
    order_lock = threading.Lock()
    """Between the reader's cancels and the start of an item: a cancel is never missed."""
    encode = msgspec.msgpack.Encoder().encode
    decode = msgspec.msgpack.Decoder(_Order).decode

    def read_orders() -> None:  # eagerly, so that the parent's writes never wait
        while (frame := _read_frame(source)) is not None:
            order = decode(frame)
            if order.request is not None:
                orders.put(order)
                continue
            with order_lock:
                if order.seq == running[0]:
                    lane.stop_requested = True  # before its job exists
                    job = lane.job
                    if job is not None:
                        job.cancel()
                else:
                    cancelled.add(order.seq)
        orders.put(None)

    def answer(seq: int, result: ExecResult) -> None:
        with write_lock:
            if running[0] == seq and not running[1]:
                running[1] = True
                _write_frame(out, encode(_Answer(seq, result)))

    with Runner(config["data_dir"], concurrency=1, mounts=mounts) as runner:
        lane = ItemLane(runner)

        def watch() -> None:  # a guest stuck in a host call: answer for it, and end the process
            while True:
                time.sleep(WATCHDOG_POLL_S)
                job, seq = lane.job, running[0]
                if job is not None and _overdue(job):
                    job.cancel()
                    answer(seq, runner._abandoned(job))
                    os._exit(70)

        threading.Thread(target=read_orders, daemon=True).start()
        threading.Thread(target=watch, daemon=True).start()
        gc.collect()
        gc.freeze()  # a full collection would walk every module and type loaded so far, items waiting
        _write_frame(out, _READY)
        while (order := orders.get()) is not None:
            with order_lock:
                running[:] = [order.seq, False]
                lane.stop_requested = order.seq in cancelled
                cancelled.discard(order.seq)
            if lane.stop_requested:  # cancelled before it started: nobody waits for it
                answer(order.seq, ExecResult(exit_code=130, id=order.request.id))
                continue
            answer(order.seq, lane.run(order.request))
            lane.finish()
        lane.close()


if __name__ == "__main__":
    main()
