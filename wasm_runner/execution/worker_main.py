"""A worker process's loop (see `workers`): runs the items its parent orders, one at a time,
and hands the orders for a session's kernels to its `KernelHost`.

The process itself is `wasm_runner.worker`, which builds the Runner and passes it in here: the
loop needs only what `WorkerRunner` names, so nothing here imports the facade.
"""

from __future__ import annotations

import gc
import os
import queue
import signal
import threading
import time
from typing import BinaryIO, Protocol

import msgspec

from wasm_runner.engine.engines import EPOCH_TICK_S, epoch_checks
from wasm_runner.execution.executor import WATCHDOG_POLL_S, Executor, is_overdue
from wasm_runner.execution.kernel_host import KernelHost, OpenSession
from wasm_runner.execution.lanes import ItemLane
from wasm_runner.execution.pipe import READY, RETIRED_EXIT_CODE, Answer, Order, read_frame, write_frame
from wasm_runner.execution.scratch import ScratchPool
from wasm_runner.providers.base import Provider
from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["EPOCH_FREE_MIN_TIMEOUT_S", "WorkerRunner", "keeps_epoch_checks", "reset_signals", "serve", "take_pipes"]


EPOCH_FREE_MIN_TIMEOUT_S = 0.5
"""Items with a shorter deadline keep epoch checks: ending and replacing a worker costs about
0.35 s of CPU, which a flood of looping 1 ms runs would otherwise multiply."""


def keeps_epoch_checks(request: ExecRequest) -> bool:
    """Whether an item runs on an engine with epoch checks in an epoch-free worker: one whose
    stop ending the process would cost more than it saves (a short deadline), or would cut
    short the item's other parts (the io harness's other cases)."""
    return request.harness == "io" or request.limits.timeout_s < EPOCH_FREE_MIN_TIMEOUT_S


class WorkerRunner(Protocol):
    """What the loop needs of the worker's in-process Runner."""

    executor: Executor
    concurrency: int
    scratch: ScratchPool

    def provider_for(self, request: ExecRequest) -> Provider: ...

    def prepare(self) -> None: ...


def reset_signals() -> None:
    """Default handling, whatever the parent ignores (a service started in the background ignores
    INT and QUIT): the native sandboxes started here inherit it. A terminal's Ctrl-C does not
    reach this process group."""
    for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def take_pipes() -> tuple[BinaryIO, BinaryIO]:
    """The parent's pipes (orders in, answers out), taken before anything else runs: they carry
    frames only, so nothing else in the process (a print, a library, a native sandbox) may read
    or write them as its standard streams."""
    source, out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    return source, out


def serve(runner: WorkerRunner, source: BinaryIO, out: BinaryIO, open_session: OpenSession | None) -> None:
    """Answer the parent's orders until its pipe closes; `open_session` is given to a worker that
    hosts sessions' kernels."""
    orders: queue.SimpleQueue[Order | None] = queue.SimpleQueue()
    write_lock = threading.Lock()
    running = [0, False]
    """The item running now, and whether it was answered (the watchdog may answer for it)."""
    cancelled: set[int] = set()
    parent_gone = threading.Event()
    order_lock = threading.Lock()
    """Between the reader's cancels and the start of an item: a cancel is never missed."""
    encode = msgspec.msgpack.Encoder().encode
    decode = msgspec.msgpack.Decoder(Order).decode

    def read_orders() -> None:  # eagerly, so that the parent's writes never wait
        while (frame := read_frame(source)) is not None:
            order = decode(frame)
            if order.place is not None or order.kind in ("install", "tool"):  # a session's kernels: the kernel host's
                assert kernels is not None, "kernel orders sent to a worker that hosts none"
                kernels.order(order)
                continue
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
        if kernels is not None:
            kernels.parent_ended()
        with order_lock:  # nobody waits for the item running, nor for the ones queued
            parent_gone.set()
            lane.stop_requested = True
            if lane.job is not None:
                lane.job.cancel()
        orders.put(None)

    def answer(seq: int, result: ExecResult) -> None:
        with write_lock:
            if running[0] == seq and not running[1]:
                running[1] = True
                write_frame(out, encode(Answer(seq, result)))

    def send(message: Answer) -> None:
        with write_lock:
            write_frame(out, encode(message))

    def exit_retired() -> None:  # every turn is answered: the stuck thread goes with the process
        with write_lock:
            out.flush()
            os._exit(RETIRED_EXIT_CODE)

    lane = ItemLane(runner.provider_for, runner.scratch)
    kernels = KernelHost(runner, open_session, send, exit_retired) if open_session is not None else None
    if kernels is not None:  # compiled modules mapped before the first turn's clock starts
        runner.prepare()

    def answer_and_exit(seq: int, result: ExecResult) -> None:
        """Answer for a guest nothing else can stop, and end the process with it (the parent
        replaces the worker); not if the item was answered meanwhile."""
        with write_lock:
            if running[0] == seq and not running[1]:
                running[1] = True
                write_frame(out, encode(Answer(seq, result)))
                out.flush()
                os._exit(RETIRED_EXIT_CODE)

    def watch() -> None:
        """A guest on an engine without epoch checks (`Job.stop_due`): at its deadline or a stop
        (output, disk, cancel), answer for it and end the process, every tick. A guest stuck in a
        host call: answer for it, and end the process."""
        while True:
            job, seq = lane.job, running[0]
            due = job.stop_due if job is not None else None
            time.sleep(EPOCH_TICK_S if due is not None else WATCHDOG_POLL_S)
            if job is None or job is not lane.job:
                continue
            limit = due() if due is not None else None
            if limit is not None and job.stopped_result is not None:
                answer_and_exit(seq, job.stopped_result(limit))
            elif is_overdue(job):
                job.cancel()
                answer(seq, runner.executor.replace_stuck_worker(job))
                os._exit(RETIRED_EXIT_CODE)

    gc.collect()
    gc.freeze()  # a full collection would walk every module and type loaded so far, items waiting
    write_frame(out, READY)  # before any answer: orders the parent sent early are read from now on
    threading.Thread(target=read_orders, daemon=True).start()
    threading.Thread(target=watch, daemon=True).start()
    while (order := orders.get()) is not None and not parent_gone.is_set():
        assert order.request is not None  # only orders to run are queued
        with order_lock:
            running[:] = [order.seq, False]
            lane.stop_requested = order.seq in cancelled or parent_gone.is_set()
            cancelled.discard(order.seq)
        if lane.stop_requested:  # cancelled before it started: nobody waits for it
            answer(order.seq, ExecResult(exit_code=130, id=order.request.id))
            continue
        if keeps_epoch_checks(order.request):
            with epoch_checks():
                result = lane.run(order.request)
        else:
            result = lane.run(order.request)
        answer(order.seq, result)
        lane.finish()
    lane.close()
