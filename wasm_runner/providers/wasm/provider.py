"""The WebAssembly provider: runs a Job in a fresh instance or in the session's kernel."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from ...api import ExecResult, GuestError, Limits
from ...engine import EngineSettings, StopReason
from ...quota import exceeds, watcher
from ...workspace import Workspace, diff
from ..base import Job
from .sandbox import LIMIT_MESSAGES, Call, Mount, Outcome, View, engine_settings
from .warm_pool import WarmPool


@dataclass
class KernelSlot:
    """A session's kernel for one language; `lost` remembers that state was dropped."""

    kernel: Any = None
    lost: bool = False


class WasmProvider:
    name = "wasm"
    languages = frozenset({"python", "javascript"})

    def __init__(self, mounts: tuple[Mount, ...] = (), prewarm_languages: tuple[str, ...] = ("python",)) -> None:
        self.mounts = mounts
        self.prewarm_languages = prewarm_languages
        self._runtimes: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._warm = WarmPool(self._warm_kernel, Limits())

    def _warm_kernel(self, language: str, view: View, limits: Limits) -> Any:
        kernel = self.runtime(language).new_kernel(view, limits)
        if hasattr(kernel, "warm"):
            kernel.warm()
        return kernel

    def _view(self, workspace: Workspace) -> View:
        return View(workspace.files, workspace.tmp, self.mounts)

    def prewarm(self, workspace: Workspace) -> None:
        """Instantiate sandboxes for a scratch workspace ahead of its next one-shot run."""
        for language in self.prewarm_languages:
            self._warm.request(language, self._view(workspace))

    def discard(self, workspace: Workspace) -> None:
        self._warm.discard(self._view(workspace))

    def runtime(self, language: str):
        with self._lock:
            if language not in self._runtimes:
                if language == "python":
                    from .python import PythonRuntime

                    self._runtimes[language] = PythonRuntime()
                elif language == "javascript":
                    from .javascript import JavaScriptRuntime

                    self._runtimes[language] = JavaScriptRuntime()
                else:
                    raise ValueError(f"the wasm provider does not run {language!r}")
            return self._runtimes[language]

    def prepare(self, fuel: bool = True) -> None:
        for language in sorted(self.languages):
            runtime = self.runtime(language)
            runtime.prepare(EngineSettings(fuel=False))
            if fuel:
                runtime.prepare(EngineSettings(fuel=True))

    def execute(self, job: Job) -> ExecResult:
        request = job.request
        workspace = job.workspace.ensure()
        view = self._view(workspace)
        call = Call(code=request.code, limits=request.limits, stdin=request.stdin, env=request.env,
                    listener=job.listener)
        job.on_cancel(lambda: call.stop(StopReason.cancelled))
        quota_key = watcher.watch(workspace, request.limits, lambda: call.stop(StopReason.disk))
        self._warm.busy()
        before = workspace.snapshot()
        restarted = False
        started = time.perf_counter()
        try:
            runtime = self.runtime(request.language)
            runtime.prepare(engine_settings(request.limits))  # compiles on first use only
            started = time.perf_counter()
            job.started_at = time.monotonic()
            if job.kernels is None and (warm := self._warm.take(request.language, view, request.limits)):
                try:
                    outcome = warm.run(call)
                finally:
                    warm.close()
            elif request.fresh or job.kernels is None:
                outcome = runtime.fresh(view, call)
            else:
                slot = job.kernels.setdefault(request.language, KernelSlot())
                if slot.kernel is None or not slot.kernel.accepts(request.limits):
                    if slot.kernel is not None:
                        slot.kernel.close()
                        slot.lost = True
                    restarted, slot.lost = slot.lost, False
                    slot.kernel = None
                    slot.kernel = runtime.new_kernel(view, request.limits)
                outcome = slot.kernel.run(call)
                if outcome.instance_lost:
                    slot.kernel.close()
                    slot.kernel, slot.lost = None, True
        except Exception as exc:  # the runtime could not start: report, never raise
            outcome = _startup_failure(exc, call)
        finally:
            self._warm.done()
            watcher.unwatch(quota_key)
        duration_ms = (time.perf_counter() - started) * 1000
        after, used_bytes, entries = workspace.scan()
        if outcome.limit is None and exceeds(request.limits, used_bytes, entries):
            outcome.limit = "disk"
            outcome.error = outcome.error or GuestError(type="LimitExceeded", message=LIMIT_MESSAGES["disk"])
        truncated = [c.stream for c in (call.stdout, call.stderr) if c.truncated]
        if truncated and outcome.limit is None:
            outcome.limit = "output"
        return ExecResult(
            stdout=call.stdout.text(),
            stderr=call.stderr.text(),
            exit_code=outcome.exit_code,
            value=outcome.value,
            error=outcome.error,
            limit=outcome.limit,
            truncated=truncated,
            duration_ms=round(duration_ms, 3),
            fuel_used=outcome.fuel_used,
            memory_peak_bytes=outcome.memory_peak_bytes,
            files=diff(before, after),
            kernel_restarted=restarted,
            language=request.language,
            isolation="wasm",
            id=request.id,
        )


def _startup_failure(exc: Exception, call: Call) -> Outcome:
    if call.interrupt is not None and call.interrupt.reason is not None:
        from .sandbox import trap_outcome

        return trap_outcome(exc, call.interrupt)
    return Outcome(exit_code=1, instance_lost=True, error=GuestError(
        type="RuntimeUnavailable", message=f"the sandbox could not start: {exc}"))
