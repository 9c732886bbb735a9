"""The WebAssembly provider: runs a Job in a fresh instance or in the session's kernel."""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from wasm_runner.egress.host_client import HostClient
from wasm_runner.egress.redaction import redact_result
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.engine import EngineSettings, StopReason
from wasm_runner.errors import NoProviderError
from wasm_runner.guest import Mount
from wasm_runner.hints import DATA_MODULES, network_hint, with_hint
from wasm_runner.manifests import RUNTIMES_DIR
from wasm_runner.providers.base import Job, Provider
from wasm_runner.providers.wasm import guest_http, guest_installs, guest_tools
from wasm_runner.providers.wasm.kernel import Kernel, Runtime
from wasm_runner.providers.wasm.kernel_slots import KernelSlot
from wasm_runner.providers.wasm.sandbox import Call, Outcome, View, engine_settings, wait_closed
from wasm_runner.providers.wasm.warm_pool import WarmPool
from wasm_runner.workspace.layout import Workspace, diff
from wasm_runner.workspace.quota import RunDisk, watcher
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecRequest, ExecResult, GuestError, LimitName, Limits, Verdict

log = logging.getLogger("wasm_runner")


class WasmProvider(Provider):
    name = "wasm"
    languages = frozenset({"python", "javascript", "typescript"})

    def __init__(self, mounts: tuple[Mount, ...] = (),
                 prewarm_languages: tuple[str, ...] = ("python", "javascript"),
                 egress: EgressSettings | None = None) -> None:
        self.mounts = mounts
        self.http = HostClient(egress)
        """Makes the HTTP requests of this provider's guests (their pools live as long as it does)."""
        self.prewarm_languages = prewarm_languages
        self._also_prewarmed: tuple[str, ...] = ()
        """Other languages one-shot runs have used (TypeScript): made ahead too from then on."""
        self._runtimes: dict[str, Runtime] = {}
        self._lock = threading.Lock()
        _open_providers.add(self)
        self._warm = WarmPool(lambda language, view, limits: self.runtime(language).new_kernel(view, limits, True),
                              Limits())

    def _view(self, workspace: Workspace, mounts: tuple[Mount, ...] = ()) -> View:
        return View(workspace.files, workspace.tmp, self.mounts + mounts)

    def prewarm(self, workspace: Workspace) -> None:
        """Instantiate sandboxes for a scratch workspace ahead of its next one-shot run."""
        for language in self.prewarm_languages + self._also_prewarmed:
            self._warm.request(language, self._view(workspace))

    def discard(self, workspace: Workspace) -> None:
        self._warm.discard(self._view(workspace))

    def ready(self, workspace: Workspace, language: str) -> bool:
        """Whether a one-shot run in this scratch workspace would find its instance made."""
        return self._warm.ready(language, self._view(workspace))

    def close(self) -> None:
        self._warm.close()
        with self._lock:
            runtimes = list(self._runtimes.values())
        for runtime in runtimes:
            runtime.close()
        wait_closed()
        self.http.close()
        _open_providers.discard(self)

    def runtime(self, language: str) -> Runtime:
        with self._lock:
            if language not in self._runtimes:
                if language == "python":
                    from wasm_runner.providers.wasm.python import PythonRuntime

                    self._runtimes[language] = PythonRuntime()
                elif language == "javascript":
                    from wasm_runner.providers.wasm.javascript import JavaScriptRuntime

                    self._runtimes[language] = JavaScriptRuntime()
                elif language == "typescript":
                    from wasm_runner.providers.wasm.typescript import TypeScriptRuntime

                    self._runtimes[language] = TypeScriptRuntime()
                else:
                    raise NoProviderError(f"the wasm provider does not run {language!r}")
            return self._runtimes[language]

    def prepare(self, fuel: bool = True) -> None:
        """Compile every runtime for each engine it may run on: with epoch checks (in-process
        guests) and without (worker processes, decision 0012), with fuel metering and without."""
        for language in sorted(self.languages):
            runtime = self.runtime(language)
            for epoch in (True, False):
                runtime.prepare(EngineSettings(fuel=False, epoch=epoch))
                if fuel:
                    runtime.prepare(EngineSettings(fuel=True, epoch=epoch))

    def _check(self, kernel: Kernel, program: Call, request: ExecRequest) -> tuple[Outcome, Call]:
        """Run the program, then its tests in the same new instance, within one deadline.

        An exception in the program is an `error`; any exception in the tests means `failed`.
        Output of both phases is kept, in order.
        """
        started = time.monotonic()
        program.filename = "<program>"
        if kernel.runs_tests:  # one guest call for both phases
            program.tests = request.tests
            outcome = kernel.run(program)
            outcome.phase = outcome.phase or "program"  # a trap leaves the phase unknown
            return outcome, program
        outcome = kernel.run(program)
        outcome.phase = "program"
        failed = outcome.error is not None or outcome.limit is not None or outcome.exit_code != 0
        if failed or program.stopped:
            return outcome, program
        remaining = max(request.limits.timeout_s - (time.monotonic() - started), 0.001)
        if request.language in ("javascript", "typescript"):
            prelude = Call(code=check_prelude(), limits=msgspec.structs.replace(request.limits, timeout_s=remaining),
                           env=request.env, filename="<harness>", stdout=program.stdout, stderr=program.stderr)
            program.successor = prelude
            if program.stopped is not None:
                prelude.stop(program.stopped)
            ran = kernel.run(prelude)
            if ran.limit is not None or prelude.stopped:  # the program's own state broke it: a verdict as it is
                ran.phase = "program"
                return ran, prelude
            remaining = max(request.limits.timeout_s - (time.monotonic() - started), 0.001)
        tests = Call(code=request.tests, limits=msgspec.structs.replace(request.limits, timeout_s=remaining),
                     env=request.env, listener=program.listener, filename="<tests>",
                     stdout=program.stdout, stderr=program.stderr)
        before = program.successor or program  # the prelude, when there was one
        before.successor = tests  # stops aimed at the execution reach the tests
        if before.stopped is not None:  # one that arrived just before
            tests.stop(before.stopped)
        outcome = kernel.run(tests)
        outcome.phase = "tests"
        return outcome, tests

    def execute(self, job: Job) -> ExecResult:
        request = job.request
        workspace = job.workspace if job.scratch else job.workspace.ensure()
        view = self._view(workspace, job.mounts)
        call = Call(code=request.code, limits=request.limits, stdin=request.stdin, env=request.env,
                    listener=job.listener, cwd=workspace.guest_cwd)
        job.on_cancel(lambda: call.stop(StopReason.cancelled))
        job.printed = lambda: _printed(call)
        before: dict[str, Any] = {}
        usage = (0, 0) if job.scratch else None
        if not job.scratch:
            try:  # one walk: the snapshot the changes are computed from, and the run's starting usage
                before, start_bytes, start_entries = workspace.scan()
                usage = (start_bytes, start_entries)
            except OSError:  # RunDisk measures again, and a start it cannot measure stops the run
                log.warning("could not measure %s before a run", workspace.root, exc_info=True)
        disk = RunDisk(workspace, request.limits, view.mounts, job.disk_room, usage)
        quota_key = watcher.watch(disk, lambda: call.stop(StopReason.disk))
        self._warm.busy()
        restarted = restored = rolled_back = False
        restart_reason = None
        kernel = None
        one_shot = job.kernels is None
        if one_shot and request.language not in self.prewarm_languages + self._also_prewarmed:
            self._also_prewarmed += (request.language,)  # languages are few: a tuple swapped whole
        started = time.perf_counter()
        cpu_started = time.thread_time()  # the guest runs on this thread (wasmtime calls in)
        answering = guest_installs.serve(job.install)  # the guest's install requests, on this thread
        network = guest_http.GuestNetwork(self.http, request.effective_egress, request.credentials,
                                          time.monotonic() + request.limits.timeout_s)
        fetching = guest_http.serve(network)  # and its HTTP requests
        calling = guest_tools.serve(job.tools)  # and its tool calls
        try:
            runtime = self.runtime(request.language)
            settings = engine_settings(request.limits)
            runtime.prepare(settings)  # compiles on first use only
            started = time.perf_counter()
            cpu_started = time.thread_time()  # a first use's compile is not the guest's
            job.started_at = time.monotonic()
            if not settings.epoch:  # no epoch check stops this guest: the process's supervisor does
                job.stop_due = _stop_due(call, job.started_at + request.limits.timeout_s)
                job.stopped_result = _stopped_result(job, call, before, disk, started)
            network.deadline = job.started_at + request.limits.timeout_s  # from the guest's start, as its own
            kernel = self._warm.take(request.language, view, request.limits) if one_shot else None
            if kernel is None and (request.harness == "check" or (one_shot and runtime.reuses_instances)):
                kernel = runtime.new_kernel(view, request.limits, reusable=one_shot)
            if kernel is not None:  # an instance for this execution alone
                if request.harness == "check":
                    outcome, call = self._check(kernel, call, request)
                else:
                    outcome = kernel.run(call)
            elif request.fresh or one_shot:
                outcome = runtime.fresh(view, call)
            else:
                assert job.kernels is not None  # not one_shot
                slot = job.kernels.setdefault(request.language, KernelSlot())
                opened = slot.open(runtime, view, request.limits, job.images)
                restarted, restart_reason, restored = opened.restarted, opened.reason, opened.restored
                assert slot.kernel is not None
                slot.before_call()
                outcome = slot.kernel.run(call)
                if outcome.limit is None and (call.stdout.truncated or call.stderr.truncated):
                    outcome.limit = "output"  # a limit like the others: the kernel is rolled back
                rolled_back = slot.after_call(runtime, view, request.limits, outcome)
        except Exception as exc:  # the runtime could not start: report, never raise
            outcome = _startup_failure(exc, call)
            outcome.instance_lost = True
        finally:
            guest_installs.serve(answering)  # another job on this thread must not reach this session
            guest_http.serve(fetching)
            guest_tools.serve(calling)
            events = network.close()
            self._warm.done()
            watcher.unwatch(quota_key)
        duration_ms = (time.perf_counter() - started) * 1000
        cpu_ms = (time.thread_time() - cpu_started) * 1000
        entries = None
        disk_over = True
        after = before  # what cannot be measured is reported as unchanged
        try:
            try:
                after, used_bytes, entries = workspace.scan()
                job.left_entries = entries
                disk_over = disk.over((used_bytes, entries))
            except Exception:  # noqa: BLE001 - what cannot be measured counts as over quota
                log.warning("could not measure the disk usage of %s", workspace.root, exc_info=True)
                entries = None
        finally:
            if one_shot:
                # A scratch workspace left empty goes back to the Runner with its instance,
                # which is restored to new once the result is out, before it serves again.
                reusable = (kernel is not None and job.scratch and entries == 0 and not outcome.instance_lost
                            and runtime.reuses_instances)
                self._warm.give_back(request.language, view, kernel, reusable)
                if reusable:
                    job.after = lambda: self._warm.settle(request.language, view)
            elif kernel is not None:
                kernel.close()
        if outcome.limit is None and disk_over:
            outcome.limit = "disk"
            outcome.error = outcome.error or GuestError(type="LimitExceeded", message=disk.message())
        elif outcome.limit == "disk" and outcome.error is not None and outcome.error.type == "LimitExceeded":
            outcome.error.message = disk.message()  # stopped by the watcher: the figures and the largest files
        if outcome.error is not None:
            outcome.error = with_hint(outcome.error, network_hint(events, request.effective_egress),
                                      _python_data_modules() if outcome.error.type == "ModuleNotFoundError"
                                      else DATA_MODULES)
        truncated = [c.stream for c in (call.stdout, call.stderr) if c.truncated]
        if truncated and outcome.limit is None:
            outcome.limit = "output"
        return ExecResult(
            stdout=call.stdout.text(),
            stderr=call.stderr.text(),
            exit_code=outcome.exit_code,
            value=outcome.value,
            outputs=outcome.outputs,
            error=outcome.error,
            limit=outcome.limit,
            truncated=truncated,
            duration_ms=round(duration_ms, 3),
            cpu_ms=round(cpu_ms, 3),
            fuel_used=outcome.fuel_used,
            memory_peak_bytes=outcome.memory_peak_bytes,
            files=diff(before, after),
            kernel_restarted=restarted,
            restart_reason=restart_reason,
            kernel_restored=restored,
            kernel_rolled_back=rolled_back,
            verdict=_verdict(outcome) if request.harness == "check" else None,
            language=request.language,
            isolation="wasm",
            network=events,
            id=request.id,
        )


_open_providers: weakref.WeakSet[WasmProvider] = weakref.WeakSet()


@atexit.register
def _close_open_providers() -> None:
    """A process exiting while a thread is inside wasmtime can abort: an embedder that
    never closed its Runner still gets its sandboxes made ahead finished and released."""
    for provider in list(_open_providers):
        provider.close()


@functools.cache
def check_prelude() -> str:
    """The `assert` of Node's test suites, defined in the guest before JavaScript/TypeScript tests."""
    return (RUNTIMES_DIR / "javascript" / "check_prelude.js").read_text(encoding="utf-8")


def _printed(call: Call) -> tuple[str, str]:
    """What the execution printed so far, from the call running now (the check harness's tests
    follow its program, and share its captures)."""
    while call.successor is not None:
        call = call.successor
    if call.collect is not None:
        call.collect()
    assert call.stdout is not None and call.stderr is not None
    return call.stdout.text(), call.stderr.text()


def _last(call: Call) -> Call:
    while call.successor is not None:
        call = call.successor
    return call


def _stop_due(call: Call, deadline: float) -> Callable[[], LimitName | None]:
    """The limit that stops an execution now, on an engine without epoch checks."""

    def due() -> LimitName | None:
        stopped = _last(call).stopped
        if stopped is not None:
            return stopped.value  # the stop reasons are limit names
        return "timeout" if time.monotonic() >= deadline else None

    return due


def _stopped_result(job: Job, call: Call, before: dict[str, Any], disk: RunDisk,
                    started: float) -> Callable[[LimitName], ExecResult]:
    """The result of an execution its supervisor stops by ending the process: the fields an
    epoch trap's result has (what it printed, its files, its verdict), its secrets masked."""

    def result(limit: LimitName) -> ExecResult:
        request = job.request
        stdout, stderr = _printed(call)
        last = _last(call)
        files = diff(before, before)
        try:
            files = diff(before, job.workspace.scan()[0])
        except OSError:
            log.warning("could not list the files of a stopped run", exc_info=True)
        message = disk.message() if limit == "disk" else LIMIT_MESSAGES[limit]
        outcome = Outcome(exit_code=137, limit=limit, error=GuestError(type="LimitExceeded", message=message))
        return redact_result(request, ExecResult(
            stdout=stdout, stderr=stderr, exit_code=137, error=outcome.error, limit=limit,
            truncated=[c.stream for c in (last.stdout, last.stderr) if c.truncated],
            duration_ms=round((time.perf_counter() - started) * 1000, 3), files=files,
            verdict=_verdict(outcome) if request.harness == "check" else None,
            language=request.language, isolation="wasm", id=request.id, group=request.group))

    return result


def _verdict(outcome: Outcome) -> Verdict:
    if outcome.limit == "timeout":
        return "timeout"
    if outcome.limit is not None:
        return "limit"
    if outcome.error is not None or outcome.exit_code != 0:
        return "failed" if outcome.phase == "tests" else "error"
    return "passed"


def _startup_failure(exc: Exception, call: Call) -> Outcome:
    if call.interrupt is not None and call.interrupt.reason is not None:
        from wasm_runner.providers.wasm.sandbox import trap_outcome

        return trap_outcome(exc, call.interrupt)
    return Outcome(exit_code=1, instance_lost=True, error=GuestError(
        type="RuntimeUnavailable", message=f"the sandbox could not start: {exc}"))


def _python_data_modules() -> frozenset[str]:
    """What the python-data profile offers, from its built environment (else the pinned stack's
    main names): a failed import of one of them says where it is."""
    from wasm_runner.providers.native.inventory import python_data_modules  # only when an import failed

    return python_data_modules() or DATA_MODULES
