"""Sessions' kernels on worker processes, the parent's side (a Runner's `kernel_workers`).

The supervisor keeps `count` worker processes (`worker_main` with a `kernel_host`) and one
spare started ahead of need, from the first call on (`start`). A session is placed on the worker holding the fewest sessions
and stays there: every later call, hibernation and removal of it is an order to that worker,
which keeps its kernels. Output streams back as frames while the guest runs, so a listener
sees it live.

A worker ends for four reasons, each counted (`stats`): a guest stuck in a host call past
its deadline (the worker's watchdog answers for it, with what it printed, and the worker
retires; the supervisor SIGKILLs a worker whose call is still unanswered past the deadline
and the grace), a crash or kill from outside (its calls in flight get a HostError result that
says they may be run again), or retirement after `max_runs` calls or at `max_rss_bytes`
resident. The spare takes its place at once and a new spare starts. The worker's other
sessions are placed anew on their next call, which says `kernel_restarted` and why; their
files are untouched (they are the parent's directories). No thread of the parent ever waits
on a guest: the pipes have one reader thread per worker, and one supervising thread checks
deadlines and sizes.

A guest's `sandbox.install` arrives as a request from its worker; the session's own
`install_handler` answers it here, on a small pool of threads (installs block), with the
policy and limits of the session's installs, and the answer goes back down the pipe.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from wasm_runner.capture import OutputListener
from wasm_runner.execution.containment import Containment, WorkerPolicy, detect_containment
from wasm_runner.execution.executor import WATCHDOG_GRACE_S, WATCHDOG_POLL_S
from wasm_runner.execution.pipe import Answer, Order, Place
from wasm_runner.execution.results import lost_result, no_worker_result, stuck_result
from wasm_runner.execution.workers import Worker
from wasm_runner.guest import Mount
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.providers.wasm import guest_tools
from wasm_runner.providers.wasm.guest_installs import refusal
from wasm_runner.workspace.layout import Workspace
from wasm_runner.workspace.quota import DiskBudget
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecRequest, ExecResult, GuestError

if TYPE_CHECKING:
    from wasm_runner.egress.settings import EgressSettings

__all__ = ["HostedSession", "KernelWorkers", "SupervisionStats", "WorkerPolicy"]

log = logging.getLogger("wasm_runner")

KILL_MARGIN_S = 1.0
"""How long after the worker's own watchdog should have answered the supervisor kills it."""
SIZE_CHECK_S = 2.0
INSTALL_THREADS = 2
"""Guests' installs the parent runs at once (each waits for the resolver and downloads)."""
TOOL_CALL_THREADS = 256
"""Guests' tool calls the parent answers at once. Threads are made only when none is idle, so this
is a ceiling, high because a call may wait long (an approval, a slow tool) without doing anything."""

RESTART_CAUSES = ("deadline", "crash", "runs", "memory")
"""Why workers were replaced: a guest stuck past its deadline, an unexpected exit (signal,
OOM kill, crash), retirement after its number of runs, or at its resident size."""


class HostedSession(Protocol):
    """What the supervisor needs of a session (`wasm_runner.session.Session`)."""

    @property
    def id(self) -> str: ...

    @property
    def workspace(self) -> Workspace: ...

    @property
    def mounts(self) -> tuple[Mount, ...]: ...

    @property
    def install_handler(self) -> Callable[[str], str]: ...

    @property
    def disk_room(self) -> int | None: ...

    @property
    def owner(self) -> str: ...


@dataclass
class SupervisionStats:
    """What the supervisor did, for metrics."""

    started: int = 0
    restarts: collections.Counter[str] = field(default_factory=collections.Counter)
    deadline_kills: collections.Counter[str] = field(default_factory=collections.Counter)
    """Workers ended because a guest was stuck past its deadline, by who ended them: the
    worker itself (its watchdog answered, it exited) or the supervisor (SIGKILL)."""


@dataclass(eq=False)
class Pending:
    """A call sent to a worker and not answered yet."""

    request: ExecRequest
    future: concurrent.futures.Future[ExecResult]
    session: str
    listener: OutputListener | None
    sent_at: float
    printed: dict[str, list[bytes]] = field(default_factory=lambda: {"stdout": [], "stderr": []})
    budgets: list[DiskBudget] = field(default_factory=list)
    """Budgets of its session's mounts, which this process keeps (the worker is told when one is exceeded)."""
    over_budget: bool = False
    install: Callable[[str], str] | None = None
    """Answers its guest's install requests (the session's handler when the call was made)."""
    tools: Callable[[str], str] | None = None
    """Answers its guest's tool calls (the run's `ToolRun`); None: the run was given no tools."""


@dataclass(eq=False)
class KernelWorker:
    """One worker process hosting kernels, as the supervisor sees it."""

    worker: Worker
    sessions: set[str] = field(default_factory=set)
    pending: dict[int, Pending] = field(default_factory=dict)
    kernels: dict[str, list[str]] = field(default_factory=dict)
    """Live kernels of each of its sessions, as its last answers said."""
    runs: int = 0
    seq: int = 0
    retiring: str | None = None
    """Why it takes no more sessions (its cause in RESTART_CAUSES)."""
    overdue: set[int] = field(default_factory=set)
    """The calls past their deadline when the supervisor killed it: they get a timeout, not a loss."""
    retired_because: str | None = None
    """What its sessions' next calls are told, once it is retired."""
    acks: dict[int, tuple[threading.Event, dict[str, str] | None]] = field(default_factory=dict)
    """Hibernate and save orders waiting for their answer (and where a save's refusals go)."""

    @property
    def pid(self) -> int:
        return self.worker.proc.pid

    def rss_bytes(self) -> int | None:
        """Its private resident memory (RssAnon): the compiled images' file pages every kernel
        maps are shared with the other kernels and the page cache, and VmRSS counts them once
        a kernel."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return None


@dataclass
class Moved:
    """A session whose worker went away: what its next calls must say."""

    reason: str
    languages: set[str]


class KernelWorkers:
    """The worker processes hosting a Runner's session kernels."""

    def __init__(self, scratch_dir: Path, mounts: tuple[Mount, ...], count: int,
                 policy: WorkerPolicy = WorkerPolicy(), egress: EgressSettings | None = None,
                 packages: PackageSettings | None = None) -> None:
        self.scratch_dir = scratch_dir
        self.mounts = mounts
        self.egress = egress
        self.packages = packages
        """The Runner's package settings, for the native sandboxes the workers start."""
        self.count = max(count, 1)
        self.policy = policy
        self.containment: Containment = detect_containment(policy.memory_bytes)
        log.info("kernel workers: %s", self.containment.describe())
        self.stats = SupervisionStats()
        self.lock = threading.Lock()
        self.active: list[KernelWorker] = []
        self.spare: KernelWorker | None = None
        self.leaving: list[KernelWorker] = []
        """Retiring or killed, not exited yet."""
        self.placement: dict[str, KernelWorker] = {}
        self.moved: dict[str, Moved] = {}
        self.closed = False
        self.broken = False
        """A worker could not start: sessions run their kernels in-process."""
        self.installs = concurrent.futures.ThreadPoolExecutor(INSTALL_THREADS, thread_name_prefix="kernel-install")
        self.tool_calls = concurrent.futures.ThreadPoolExecutor(TOOL_CALL_THREADS, thread_name_prefix="kernel-tool-call")
        self._stop = threading.Event()
        self.started = False
        """Its workers are started on first need (a call, or `wait_ready`), not before."""

    def start(self) -> None:
        """Start the workers and the spare now, if not yet (a service does so at start-up)."""
        with self.lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self.started or self.closed:
            return
        self.started = True
        self.active = [self._start() for _ in range(self.count)]
        self.spare = self._start()
        threading.Thread(target=self._supervise, name="wasm-kernel-supervisor", daemon=True).start()

    # -- the workers ------------------------------------------------------------------

    def _start(self) -> KernelWorker:
        worker = Worker(self.scratch_dir, self.mounts, self.containment, self.egress, self.packages, kernels=True,
                        concurrency=self.policy.threads)
        host = KernelWorker(worker)
        worker.on_answer = lambda _, answer: self._answer(host, answer)
        if not worker.watch(None, lambda _: self._exited(host)):
            # It exited before its exit could be reported (one that cannot start exits at once):
            # reported now, once the lock held by the caller is free, so that its calls are answered.
            threading.Thread(target=self._exited, args=(host,), name="wasm-kernel-exit", daemon=True).start()
        self.stats.started += 1
        return host

    @property
    def available(self) -> bool:
        return not self.broken and not self.closed

    @property
    def workers(self) -> list[KernelWorker]:
        """Every worker process alive: serving, spare, or on its way out."""
        with self.lock:
            return [*self.active, *([self.spare] if self.spare else []), *self.leaving]

    def kernels_per_worker(self) -> dict[int, int]:
        """Live kernels of each serving worker, by its pid."""
        with self.lock:
            return {w.pid: sum(len(k) for k in w.kernels.values()) for w in self.active}

    def counts(self) -> dict[str, int]:
        """Worker processes by state: serving, spare, leaving (retired, not exited yet)."""
        with self.lock:
            return {"serving": len(self.active), "spare": int(self.spare is not None), "leaving": len(self.leaving)}

    def _retire(self, host: KernelWorker, cause: str, reason: str) -> None:
        """Take no more calls on `host` (lock held): the spare takes its place, its sessions move."""
        if host.retiring is not None:
            return
        host.retiring = cause
        self.stats.restarts[cause] += 1
        if host in self.active:
            self.active.remove(host)
            if not self.closed and not self.broken:  # a worker that cannot start is not started again and again
                if self.spare is not None and not self.spare.worker.exited.is_set():
                    self.active.append(self.spare)
                else:
                    self.active.append(self._start())
                self.spare = self._start()
        elif host is self.spare:
            self.spare = self._start() if not self.closed and not self.broken else None
        self.leaving.append(host)
        host.retired_because = f"{reason}; its files are untouched"
        for session in host.sessions:
            if self.placement.get(session) is host:
                del self.placement[session]
                self._moved(session, set(host.kernels.get(session, ())), host.retired_because)
        log.warning("kernel worker %d retired: %s", host.pid, reason)

    def _moved(self, session: str, languages: set[str], reason: str) -> None:
        """(lock held) The session's kernels of these languages went with a retired worker."""
        earlier = self.moved.get(session)
        if earlier is not None:
            languages |= earlier.languages
        if languages:
            self.moved[session] = Moved(reason, languages)

    def _exited(self, host: KernelWorker) -> None:
        """A worker process ended (reader thread): answer its calls, replace it."""
        code = host.worker.proc.returncode
        with self.lock:
            if not host.worker.ready.is_set() and host.retiring is None and not self.closed:
                log.error("a kernel worker could not start (exit code %s); sessions' calls are refused "
                          "(isolation 'process') or run in-process", code)
                self.broken = True
            if host.retiring is None and not self.closed:
                cause = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                self._retire(host, "crash", f"its worker process ended unexpectedly ({cause})")
            if host in self.leaving:
                self.leaving.remove(host)
            pending, host.pending = host.pending, {}
            acks, host.acks = host.acks, {}
        for done, refused in acks.values():  # nothing more will be saved
            if refused is not None:
                refused[""] = "the worker ended"
            done.set()
        for seq, call in pending.items():
            if seq in host.overdue:
                printed = (b"".join(call.printed["stdout"]).decode(errors="replace"),
                           b"".join(call.printed["stderr"]).decode(errors="replace"))
                _settle(call.future, stuck_result(call.request, *printed))
            elif not host.worker.ready.is_set():
                _settle(call.future, no_worker_result(call.request))
            else:
                why = "" if host.retiring == "crash" else ": another guest on it was stuck past its deadline"
                _settle(call.future, lost_result(call.request, code, why))

    def _answer(self, host: KernelWorker, answer: Answer) -> None:
        """An answer from a worker (reader thread)."""
        if answer.retiring is not None:
            with self.lock:
                self.stats.deadline_kills["worker"] += 1
                self._retire(host, "deadline", "another guest on its worker process was stopped at its "
                                               "deadline, stuck in a host call")
            return
        if answer.install is not None:
            self._ask(host, answer)
            return
        if answer.hibernated:
            with self.lock:
                ack = host.acks.pop(answer.seq, None)
            if ack is not None:
                done, refused = ack
                if refused is not None:
                    refused.update(answer.refused)
                done.set()
            return
        if answer.tool is not None:
            self._call_tool(host, answer)
            return
        if answer.result is None:  # a chunk of output
            call = host.pending.get(answer.seq)
            if call is not None and answer.stream is not None:
                call.printed[answer.stream].append(answer.data)
                if call.listener is not None:
                    call.listener(answer.stream, answer.data)
            return
        with self.lock:
            call = host.pending.pop(answer.seq, None)
            if call is not None and answer.kernels is not None:
                if self.placement.get(call.session) is host:
                    host.kernels[call.session] = answer.kernels
                elif host.retired_because is not None:  # the kernels this call made left with the worker
                    self._moved(call.session, set(answer.kernels), host.retired_because)
        if call is not None:
            result = answer.result
            if call.budgets and result.limit is None and (call.over_budget or _over(call.budgets)):
                result.limit = "disk"
                result.error = result.error or GuestError(type="LimitExceeded", message=LIMIT_MESSAGES["disk"])
            _settle(call.future, result)

    def _ask(self, host: KernelWorker, answer: Answer) -> None:
        """A guest asks to install (reader thread): its session's handler answers on an install thread."""
        assert answer.install is not None
        call = host.pending.get(answer.seq)
        if call is None or call.install is None:
            self._reply(host, answer.ask, refusal("unsupported_ecosystem", "packages install into "
                                                          "sessions only", None))
            return
        try:
            self.installs.submit(self._install, host, answer.ask, call.install, answer.install)
        except RuntimeError:  # closed
            self._reply(host, answer.ask, refusal("resolver_failed", "the service is shutting down", None))

    def _install(self, host: KernelWorker, ask: int, handler: Callable[[str], str], request: str) -> None:
        try:
            reply = handler(request)
        except Exception as exc:  # noqa: BLE001 - the guest gets a result
            log.exception("a guest's install request failed on the host")
            reply = refusal("resolver_failed", f"the host could not install: {exc}", None)
        self._reply(host, ask, reply)

    def _call_tool(self, host: KernelWorker, answer: Answer) -> None:
        """A guest calls a tool (reader thread): the run's tools decide and answer on a thread of their own."""
        assert answer.tool is not None
        call = host.pending.get(answer.seq)
        handler = call.tools if call is not None else None
        if handler is None:
            host.worker.order(Order(answer.ask, kind="tool", reply=guest_tools.NO_TOOLS))
            return

        def run(request: str = answer.tool, ask: int = answer.ask, handler: Callable[[str], str] = handler) -> None:
            reply = guest_tools.answer_with(handler, request)
            host.worker.order(Order(ask, kind="tool", reply=reply))  # a worker gone away drops it

        try:
            self.tool_calls.submit(run)
        except RuntimeError:  # closed
            host.worker.order(Order(answer.ask, kind="tool", reply=guest_tools.refusal(
                "cancelled", "the service is shutting down")))

    @staticmethod
    def _reply(host: KernelWorker, ask: int, reply: str) -> None:
        host.worker.order(Order(ask, kind="install", reply=reply))  # a worker gone away drops it

    def _check_budgets(self) -> None:
        """Tell workers of the runs whose mounts' budgets are exceeded (their quota watcher stops them)."""
        with self.lock:
            watched = [(host, seq, call) for host in self.active for seq, call in host.pending.items()
                       if call.budgets and not call.over_budget]
        for host, seq, call in watched:
            if _over(call.budgets):
                call.over_budget = True
                host.worker.order(Order(seq, place=Place(call.session, ""), kind="over-budget"))

    def _supervise(self) -> None:
        """Kill workers whose calls are overdue; retire workers past their size or runs."""
        next_size_check = 0.0
        while not self._stop.wait(WATCHDOG_POLL_S):
            now = time.monotonic()
            kill: list[KernelWorker] = []
            with self.lock:
                for host in [*self.active, *self.leaving]:
                    ready_at = host.worker.ready_at
                    if ready_at is None or host.overdue:
                        continue
                    late = {seq: _late_by(call, ready_at, now) for seq, call in host.pending.items()}
                    if any(by > WATCHDOG_GRACE_S + KILL_MARGIN_S for by in late.values()):
                        host.overdue = {seq for seq, by in late.items() if by > 0}
                        self.stats.deadline_kills["supervisor"] += 1
                        self._retire(host, "deadline", "another guest on its worker process was stopped "
                                                       "at its deadline, stuck in a host call")
                        kill.append(host)
                    elif host.retiring is not None and not host.pending:
                        kill.append(host)  # retired, and nothing in flight: its sessions moved already
                    elif host.retiring is None and host.runs >= self.policy.max_runs:
                        self._retire(host, "runs", f"its worker process was replaced after {host.runs} runs")
                check_sizes = now >= next_size_check and self.policy.max_rss_bytes is not None
                serving = list(self.active) if check_sizes else []
            for host in kill:
                host.worker.kill()
            self._check_budgets()
            if check_sizes:
                next_size_check = now + SIZE_CHECK_S
                for host in serving:
                    rss = host.rss_bytes()
                    if rss is not None and self.policy.max_rss_bytes is not None and rss >= self.policy.max_rss_bytes:
                        with self.lock:
                            self._retire(host, "memory", f"its worker process was replaced at {rss / 2**20:.0f} "
                                                         "MiB resident")

    def wait_ready(self, timeout: float) -> bool:
        """Start the workers if not yet, and wait until the serving workers and the spare took
        their first order; False if one could not start (then sessions run their kernels
        in-process, or get a refusal on a Runner that runs guests on workers only)."""
        self.start()
        deadline = time.monotonic() + timeout
        for host in self.workers:
            while not host.worker.ready.wait(0.1):
                if self.broken or host.worker.exited.is_set() or time.monotonic() > deadline:
                    return False
        return not self.broken

    # -- calls ------------------------------------------------------------------------

    def kernels_of(self, session_id: str) -> list[str]:
        with self.lock:
            host = self.placement.get(session_id)
            return list(host.kernels.get(session_id, ())) if host is not None else []

    def _place(self, session: HostedSession) -> KernelWorker:
        """The session's worker (lock held); a new session goes to the one with the fewest."""
        host = self.placement.get(session.id)
        if host is None or host.retiring is not None:
            host = min(self.active, key=lambda w: (not w.worker.ready.is_set(), len(w.sessions)))
            self.placement[session.id] = host
            host.sessions.add(session.id)
        return host

    def submit(self, session: HostedSession, request: ExecRequest, listener: OutputListener | None,
               tools: Callable[[str], str] | None = None,
               ) -> tuple[KernelWorker, int, Place, concurrent.futures.Future[ExecResult]]:
        future: concurrent.futures.Future[ExecResult] = concurrent.futures.Future()
        place = _place_of(session)
        with self.lock:
            self._start_locked()
            host = self._place(session)
            host.seq += 1
            host.runs += 1
            seq = host.seq
            host.pending[seq] = Pending(request, future, session.id, listener, time.monotonic(),
                                        budgets=[m.budget for m in session.mounts if m.budget is not None],
                                        install=session.install_handler, tools=tools)
            moved = self.moved.get(session.id)
        host.worker.order(Order(seq, request, place, stream=listener is not None, disk_room=session.disk_room))
        if moved is not None:
            future = _with_restart_notice(future, moved, request, self.moved, session.id)
        return host, seq, place, future

    async def run(self, session: HostedSession, request: ExecRequest, listener: OutputListener | None,
                  tools: Callable[[str], str] | None = None) -> ExecResult:
        host, seq, place, future = self.submit(session, request, listener, tools)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:  # the caller went away: stop its guest (the answer is dropped)
            host.worker.order(Order(seq, place=place))
            raise

    def run_blocking(self, session: HostedSession, request: ExecRequest, listener: OutputListener | None,
                     tools: Callable[[str], str] | None = None) -> ExecResult:
        return self.submit(session, request, listener, tools)[3].result()

    def hibernate(self, session: HostedSession) -> threading.Event:
        """Tell the session's worker to save and drop its kernels; the event is set once it has
        (at once when it has none, or the worker goes away)."""
        done = threading.Event()
        self._tell(session, "hibernate", done)
        return done

    def forget(self, session: HostedSession) -> None:
        self._tell(session, "forget")
        with self.lock:
            self.moved.pop(session.id, None)

    def save(self, session: HostedSession, timeout_s: float, compress: bool = True) -> dict[str, str] | None:
        """Have the session's worker save its live kernels (they keep running): the languages it
        could not save and why, or None when it holds none or did not answer in time."""
        done = threading.Event()
        answer: dict[str, str] = {}
        self._tell(session, "save", done, answer, compress)
        return answer if done.wait(timeout_s) and not answer.get("") else None

    def _tell(self, session: HostedSession, kind: Literal["hibernate", "save", "forget"],
              done: threading.Event | None = None, refused: dict[str, str] | None = None,
              compress: bool = True) -> None:
        seq = 0
        with self.lock:
            host = self.placement.get(session.id)
            if host is None or (done is not None and session.id not in host.kernels):  # no kernel on a worker
                if done is not None:
                    if refused is not None:
                        refused[""] = "none"
                    done.set()
                return
            if kind != "save":
                host.kernels.pop(session.id, None)
            if kind == "forget":
                del self.placement[session.id]
                host.sessions.discard(session.id)
            if done is not None:
                host.seq += 1
                seq = host.seq
                host.acks[seq] = (done, refused)
        host.worker.order(Order(seq, place=_place_of(session), kind=kind, compress=compress))

    def close(self) -> None:
        with self.lock:
            self.closed = True
            hosts = [*self.active, *([self.spare] if self.spare else []), *self.leaving]
        self._stop.set()
        self.installs.shutdown(wait=False, cancel_futures=True)
        self.tool_calls.shutdown(wait=False, cancel_futures=True)
        for host in hosts:
            host.worker.kill()
        for host in hosts:
            host.worker.exited.wait(5)


def _place_of(session: HostedSession) -> Place:
    workspace = session.workspace
    return Place(session.id, str(workspace.root), str(workspace.files_dir) if workspace.files_dir is not None else None,
                 [m.to_config() for m in session.mounts], session.owner, workspace.workdir, workspace.guest_root)


def _with_restart_notice(future: concurrent.futures.Future[ExecResult], moved: Moved, request: ExecRequest,
                         table: dict[str, Moved], session_id: str) -> concurrent.futures.Future[ExecResult]:
    """The result says the kernel of its language restarted, and why, when the session's old
    worker held one."""
    noticed: concurrent.futures.Future[ExecResult] = concurrent.futures.Future()

    def relay(done: concurrent.futures.Future[ExecResult]) -> None:
        try:
            result = done.result()
        except BaseException as exc:  # noqa: BLE001 - relayed
            if not noticed.done():
                noticed.set_exception(exc)
            return
        lost = result.error is not None and result.error.type == "HostError"
        if request.command is None and not request.fresh and request.language in moved.languages and not lost:
            moved.languages.discard(request.language)
            if not result.kernel_restored:  # else its saved state came back
                result.kernel_restarted = True
                result.restart_reason = moved.reason
            if not moved.languages and table.get(session_id) is moved:
                del table[session_id]
        if not noticed.done():  # not once its caller went away
            noticed.set_result(result)

    future.add_done_callback(relay)
    return noticed


def _late_by(call: Pending, ready_at: float, now: float) -> float:
    """How far past its deadline the call is (negative: not yet), from when its worker could start it."""
    return now - max(call.sent_at, ready_at) - call.request.limits.timeout_s


def _over(budgets: list[DiskBudget]) -> bool:
    """Whether a budget is exceeded; one that cannot be measured counts as exceeded."""
    try:
        return any(budget.exceeded() for budget in budgets)
    except Exception:  # noqa: BLE001 - failing closed, as the in-process quota watcher does
        log.warning("could not measure a mount's disk budget; stopping the run as over quota", exc_info=True)
        return True


def _settle(future: concurrent.futures.Future[ExecResult], result: ExecResult) -> None:
    if not future.done():
        future.set_result(result)
