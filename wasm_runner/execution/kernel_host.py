"""A worker process's side of kernel hosting (see `kernel_workers`): the sessions whose
kernels it holds, each session's orders run in turn on a pool of threads.

A session is known by the `Place` its orders carry; its kernels (`Session.state`) live here
until the parent hibernates or forgets it, or the worker ends. A turn whose guest is stuck in
a host call past its deadline is answered by the Runner's watchdog (with what the guest
printed); the worker then retires: it says so, takes no more turns, and exits once the turns
in flight are answered. The parent kills it if it does not.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from wasm_runner.execution.pipe import Answer, Order, Place
from wasm_runner.execution.results import host_error_result
from wasm_runner.guest import Mount
from wasm_runner.providers.base import Job
from wasm_runner.runner import Runner
from wasm_runner.session import Session
from wasm_runner.workspace.layout import Workspace

__all__ = ["KernelHost"]

log = logging.getLogger("wasm_runner")

STUCK_NOTICE = "a guest on this worker was stuck in a host call past its deadline"


def refuse_install(request: str) -> str:
    """The guest's `sandbox.install` on a worker: installs need the service's policy and indexes, which
    live in the parent process."""
    return json.dumps({"ok": False, "error": {
        "kind": "unsupported_ecosystem", "message": "sandbox.install is not available to kernels on worker processes",
        "hint": "install through the API (POST /v1/sessions/{id}/packages, session.install or the MCP tool "
                "install_packages); the session's later calls see the packages"}})


class KernelHost:
    """The sessions of one worker process, and their turns."""

    def __init__(self, runner: Runner, send: Callable[[Answer], None], exit_process: Callable[[], None]) -> None:
        self.runner = runner
        self.send = send
        self.exit_process = exit_process
        self.sessions: dict[str, Session] = {}
        self.queues: dict[str, collections.deque[Order]] = {}
        """Orders of each session not yet done; a session with a queue has a drain running."""
        self.running: dict[int, Session] = {}
        self.lock = threading.Lock()
        self.retiring = False
        self.pool = concurrent.futures.ThreadPoolExecutor(runner.concurrency, thread_name_prefix="kernel-turn")
        runner.executor.on_stuck = self._stuck

    def order(self, order: Order) -> None:
        """Take an order from the parent (on its reader thread: never blocks)."""
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

    def _session(self, place: Place) -> Session:
        session = self.sessions.get(place.session)
        if session is None:
            mounts = tuple(Mount(Path(m["host"]), m["guest"], bool(m.get("writable")),
                                 budget=ParentBudget() if m.get("budgeted") else None) for m in place.mounts)
            workspace = Workspace(Path(place.root), Path(place.files) if place.files else None)
            session = Session(self.runner, place.session, workspace, mounts)
            session.install_handler = refuse_install
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
            return
        if order.kind == "forget":
            session.hibernate()
            self.sessions.pop(order.place.session, None)
            return
        assert order.request is not None
        seq = order.seq
        listener = None
        if order.stream:
            def listener(stream, data: bytes) -> None:
                self.send(Answer(seq, stream=stream, data=data))
        for budget in _budgets(session.mounts):
            budget.over = False  # until the parent says otherwise, for this run
        with self.lock:
            self.running[seq] = session
        try:
            result = session.run_sync(order.request, listener=listener)
        finally:
            with self.lock:
                self.running.pop(seq, None)
                done = self.retiring and not self.running
        self.send(Answer(seq, result, kernels=session.kernels))
        if done:
            self.exit_process()

    def _cancel(self, seq: int) -> None:
        with self.lock:
            session = self.running.get(seq)
            if session is None:  # not started: drop it from its queue
                for queue in self.queues.values():
                    for order in list(queue)[1:]:
                        if order.seq == seq:
                            queue.remove(order)
                            self.send(Answer(seq, _cancelled(order)))
                            return
                return
        session.cancel()

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


def _cancelled(order: Order):
    from wasm_runner_protocol.execution import ExecResult

    assert order.request is not None
    return ExecResult(exit_code=130, id=order.request.id, language=order.request.language)
