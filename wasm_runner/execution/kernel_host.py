"""A worker process's side of kernel hosting (see `kernel_workers`): the sessions whose
kernels it holds, each session's orders run in turn on a pool of threads.

A session is known by the `Place` its orders carry; its kernels (`Session.state`) live here
until the parent hibernates or forgets it, or the worker ends. A turn whose guest is stuck in
a host call past its deadline is answered by the Runner's watchdog (with what the guest
printed); the worker then retires: it says so, takes no more turns, and exits once the turns
in flight are answered. The parent kills it if it does not.

The host is given what it needs (the Runner's executor and concurrency, and how to open a
session on a workspace) by the worker process that builds the Runner: nothing here imports the
facade it serves.

A guest's `sandbox.install` is the parent's to answer (its policy, indexes, limits and audit):
the request goes up the pipe as data and the guest's call waits for the reply, no longer than
the call's deadline; a cancelled call or a parent gone away ends the wait with an error. A
guest's tool call goes the same way: the parent holds the run's tools and decides each call.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from wasm_runner.capture import OutputListener
from wasm_runner.execution.executor import Executor
from wasm_runner.execution.pipe import Answer, Order, Place
from wasm_runner.execution.results import host_error_result
from wasm_runner.guest import Mount
from wasm_runner.providers.base import Job
from wasm_runner.providers.wasm import guest_tools
from wasm_runner.providers.wasm.guest_installs import refusal
from wasm_runner.tools.calls import ANSWER_MARGIN_S
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.execution import ExecRequest, ExecResult

__all__ = ["KernelHost", "KernelHostRunner", "OpenSession", "WorkerSession"]

log = logging.getLogger("wasm_runner")

STUCK_NOTICE = "a guest on this worker was stuck in a host call past its deadline"


MAX_INSTALL_REQUEST = 256 * 1024
"""Characters of a guest's install request sent up the pipe (a full request is far smaller)."""
MAX_TOOL_REQUEST = 4 * 1024 * 1024
"""Characters of a guest's tool call sent up the pipe (the parent's policy caps it lower by default)."""
API_HINT = ("install through the API (POST /v1/sessions/{id}/packages, session.install or the MCP tool "
            "install_packages); the session's later calls see the packages")


@dataclass(eq=False)
class Ask:
    """A guest's install request sent to the parent, waiting for its reply."""

    seq: int
    """The run whose guest asks."""
    done: threading.Event = field(default_factory=threading.Event)
    reply: str = ""
    tool: bool = False
    """A tool call (its refusals are tool answers), else an install."""

    def refuse(self, why: str) -> None:
        self.settle(guest_tools.refusal("cancelled", why) if self.tool else refusal("resolver_failed", why))

    def settle(self, reply: str) -> None:
        if not self.done.is_set():
            self.reply = reply
            self.done.set()


class WorkerSession(Protocol):
    """What the host needs of a session whose kernels it holds (a `Session`)."""

    mounts: tuple[Mount, ...]
    disk_room: int | None
    """Bytes the parent reserved for the next run."""
    install_handler: Callable[[str], str]
    """Answers the guest's install requests of the next run."""
    tool_handler: Callable[[str], str] | None
    """Answers the guest's tool calls of the next run (the parent holds the run's tools)."""

    @property
    def kernels(self) -> list[str]: ...

    def hibernate(self, wait_s: float | None = None) -> threading.Event | None: ...

    def drop_kernels(self) -> None: ...

    def checkpoint_kernels(self) -> None: ...

    def save_kernels(self, timeout_s: float = 30.0, compress: bool = True) -> dict[str, str]: ...

    def run_sync(self, code: ExecRequest, *, listener: OutputListener | None = None,
                 on_job: Callable[[Job], None] | None = None) -> ExecResult: ...


OpenSession = Callable[[str, Workspace, tuple[Mount, ...], str], WorkerSession]
"""Opens session `id` on a workspace with its mounts, for its owner (a `Session` of the worker's Runner)."""


class KernelHostRunner(Protocol):
    """What the host needs of the worker's Runner."""

    executor: Executor
    concurrency: int


class KernelHost:
    """The sessions of one worker process, and their turns."""

    def __init__(self, runner: KernelHostRunner, open_session: OpenSession, send: Callable[[Answer], None],
                 exit_process: Callable[[], None]) -> None:
        self.open_session = open_session
        self.send = send
        self.exit_process = exit_process
        self.sessions: dict[str, WorkerSession] = {}
        self.queues: dict[str, collections.deque[Order]] = {}
        """Orders of each session not yet done; a session with a queue has a drain running."""
        self.running: dict[int, WorkerSession] = {}
        self.jobs: dict[int, Job] = {}
        """The job of each running call, once its session made it."""
        self.cancelled: set[int] = set()
        """Calls cancelled while being set up (before their job existed): they stop as they start."""
        self.lock = threading.Lock()
        self.retiring = False
        self.asks: dict[int, Ask] = {}
        self.last_ask = 0
        self.parent_gone = False
        self.pool = concurrent.futures.ThreadPoolExecutor(runner.concurrency, thread_name_prefix="kernel-turn")
        runner.executor.on_stuck = self._stuck

    def order(self, order: Order) -> None:
        """Take an order from the parent (on its reader thread: never blocks)."""
        if order.kind in ("install", "tool"):
            with self.lock:
                ask = self.asks.get(order.seq)
            if ask is not None:  # else its wait ended already
                ask.settle(order.reply)
            return
        if order.request is None and not order.kind:
            self._cancel(order.seq)
            return
        if order.kind == "over-budget":
            with self.lock:
                session = self.running.get(order.seq)
            for budget in _budgets(session.mounts if session is not None else ()):
                budget.over = True  # the quota watcher stops the run
            return
        place = order.place
        assert place is not None
        with self.lock:
            queue = self.queues.get(place.session)
            if queue is not None:
                queue.append(order)
                return
            self.queues[place.session] = collections.deque([order])
        self.pool.submit(self._drain, place.session)

    def _session(self, place: Place) -> WorkerSession:
        session = self.sessions.get(place.session)
        if session is None:
            mounts = tuple(Mount(Path(m["host"]), m["guest"], bool(m.get("writable")),
                                 budget=ParentBudget() if m.get("budgeted") else None,
                                 shared=bool(m.get("shared")), alias=bool(m.get("alias"))) for m in place.mounts)
            workspace = Workspace(Path(place.root), Path(place.files) if place.files else None, place.workdir,
                                  place.guest_root)
            session = self.open_session(place.session, workspace, mounts, place.owner)
            self.sessions[place.session] = session
        return session

    def _drain(self, session_id: str) -> None:
        while True:
            with self.lock:
                queue = self.queues[session_id]
                if not queue:
                    del self.queues[session_id]
                    return
                order = queue[0]
            try:
                self._do(order)
            except Exception as exc:  # noqa: BLE001 - the parent must get an answer
                log.exception("a kernel order failed")
                if order.request is not None:
                    self.send(Answer(order.seq, host_error_result(order.request, exc)))
            with self.lock:
                queue.popleft()

    def _do(self, order: Order) -> None:
        assert order.place is not None
        session = self._session(order.place)
        if order.kind == "hibernate":
            session.hibernate()
            if order.seq:
                self.send(Answer(order.seq, hibernated=True))
            return
        if order.kind == "save":
            refused = session.save_kernels(compress=order.compress)
            self.send(Answer(order.seq, hibernated=True, refused=refused))
            return
        if order.kind == "forget":  # the session is being deleted: nothing is saved
            session.drop_kernels()
            self.sessions.pop(order.place.session, None)
            return
        assert order.request is not None
        seq = order.seq
        listener = None
        if order.stream:
            def listener(stream: Literal["stdout", "stderr"], data: bytes) -> None:
                self.send(Answer(seq, stream=stream, data=data))
        for budget in _budgets(session.mounts):
            budget.over = False  # until the parent says otherwise, for this run
        session.disk_room = order.disk_room  # what the parent reserved for this run
        # The guest's clock starts after this, so the wait for an install ends before its deadline.
        session.install_handler = self._asker(seq, time.monotonic() + order.request.limits.timeout_s)
        session.tool_handler = self._tool_asker(seq, order.request.limits.timeout_s)
        with self.lock:
            if seq in self.cancelled:
                self.cancelled.discard(seq)
                self.send(Answer(seq, _cancelled(order)))
                return
            self.running[seq] = session
        try:
            try:
                result = session.run_sync(order.request, listener=listener,
                                          on_job=lambda job: self._started(seq, job))
            except Exception as exc:  # noqa: BLE001 - the parent must get an answer
                log.exception("a kernel turn failed on the host")
                result = host_error_result(order.request, exc)
            self.send(Answer(seq, result, kernels=session.kernels))
        finally:
            # Left only once answered: a retiring worker exits when the last call leaves, and
            # an answer still being written would be lost with the process.
            with self.lock:
                self.running.pop(seq, None)
                self.jobs.pop(seq, None)
                self.cancelled.discard(seq)
                done = self.retiring and not self.running
        if done:
            self.exit_process()
        elif not self.retiring:  # the answer is out: what a failed next call rolls back to, taken now
            try:
                session.checkpoint_kernels()
            except Exception:  # noqa: BLE001 - the next call takes it itself
                log.exception("a kernel checkpoint between calls failed")

    def _asker(self, seq: int, deadline: float) -> Callable[[str], str]:
        """Run `seq`'s answer to its guest's install requests: ask the parent, wait until `deadline`."""
        def ask_parent(request: str) -> str:
            if len(request) > MAX_INSTALL_REQUEST:
                return refusal("too_large", f"the install request is over {MAX_INSTALL_REQUEST} characters",
                                       "ask for fewer packages at once")
            with self.lock:
                if self.parent_gone:
                    return refusal("resolver_failed", "the service this worker served has gone away")
                self.last_ask += 1
                number = self.last_ask
                ask = self.asks[number] = Ask(seq)
            try:
                self.send(Answer(seq, install=request, ask=number))
                if not ask.done.wait(max(deadline - time.monotonic() - ANSWER_MARGIN_S, 0.0)):
                    return refusal("timeout", "the install did not finish before this call's deadline "
                                           "(it may still complete: the session's later calls would see it)",
                                           "give the call a longer timeout_s, or " + API_HINT)
                return ask.reply
            finally:
                with self.lock:
                    self.asks.pop(number, None)
        return ask_parent

    def _tool_asker(self, seq: int, timeout_s: float) -> Callable[[str], str]:
        """Run `seq`'s answer to its guest's tool calls: the parent decides each, waited for until the
        guest's deadline (`timeout_s` from its start)."""
        set_up = time.monotonic()

        def ask_parent(request: str) -> str:
            job = self.jobs.get(seq)
            deadline = (job.started_at if job is not None and job.started_at is not None else set_up) + timeout_s
            if len(request) > MAX_TOOL_REQUEST:
                return guest_tools.refusal("too_large", f"the call's arguments are over {MAX_TOOL_REQUEST} characters")
            with self.lock:
                if self.parent_gone:
                    return guest_tools.refusal("cancelled", "the service this worker served has gone away")
                self.last_ask += 1
                number = self.last_ask
                ask = self.asks[number] = Ask(seq, tool=True)
            try:
                self.send(Answer(seq, ask=number, tool=request))
                if not ask.done.wait(max(deadline - time.monotonic(), 0.0)):
                    return guest_tools.refusal("timeout", "the tool did not answer before this run's deadline")
                return ask.reply
            finally:
                with self.lock:
                    self.asks.pop(number, None)
        return ask_parent

    def parent_ended(self) -> None:
        """The parent's pipe closed: installs waiting for it get an error at once."""
        with self.lock:
            self.parent_gone = True
            asks = list(self.asks.values())
        for ask in asks:
            ask.refuse("the service this worker served has gone away")

    def _cancel(self, seq: int) -> None:
        with self.lock:
            for ask in self.asks.values():
                if ask.seq == seq:  # its guest stops once the wait ends
                    ask.refuse("the call was cancelled")
            job = self.jobs.get(seq)
            if job is None:
                for queue in self.queues.values():
                    if queue and queue[0].seq == seq:  # being set up: it stops as it starts
                        self.cancelled.add(seq)
                        return
                    for order in list(queue)[1:]:  # not started: drop it from its queue
                        if order.seq == seq:
                            queue.remove(order)
                            self.send(Answer(seq, _cancelled(order)))
                            return
                return
        job.cancel()

    def _started(self, seq: int, job: Job) -> None:
        """`seq`'s job exists (before its guest starts): a cancel that came first stops it now."""
        with self.lock:
            self.jobs[seq] = job
            cancelled = seq in self.cancelled
        if cancelled:
            job.cancel()

    def _stuck(self, job: Job) -> None:
        """A turn was given up (its thread is blocked in a host call): retire the worker."""
        with self.lock:
            first = not self.retiring
            self.retiring = True
        if first:
            self.send(Answer(0, retiring=STUCK_NOTICE))


class ParentBudget:
    """A mount's own disk budget (a DiskBudget), kept by the parent: it measures and tells."""

    def __init__(self) -> None:
        self.over = False

    def exceeded(self) -> bool:
        return self.over


def _budgets(mounts: tuple[Mount, ...]) -> list[ParentBudget]:
    return [m.budget for m in mounts if isinstance(m.budget, ParentBudget)]


def _cancelled(order: Order) -> ExecResult:
    assert order.request is not None
    return ExecResult(exit_code=130, id=order.request.id, language=order.request.language)
