"""The Provider base class: how an execution reaches an isolation technology.

A provider implements `execute`; every other hook has a default that does nothing, so the
Runner calls them all without asking which ones a provider has."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from wasm_runner.capture import OutputListener
from wasm_runner.egress.redaction import RunRedactor
from wasm_runner.guest import Mount
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.execution import Diagnostic, ExecRequest, ExecResult, GuestError, LimitName

if TYPE_CHECKING:
    from wasm_runner.snapshots.store import KernelImages


@dataclass
class Job:
    """One execution handed to a provider, run on a worker thread."""

    request: ExecRequest
    workspace: Workspace
    kernels: dict[str, Any] | None = None
    """The session's live kernels by language (the provider owns their contents); None for one-shot runs."""
    listener: OutputListener | None = None
    mounts: tuple[Mount, ...] = ()
    """Extra directories for this session only, besides the provider's own."""
    scratch: bool = False
    """The workspace is a one-shot scratch directory, known to exist and to be empty."""
    left_entries: int | None = None
    """Set by the provider: how many files and directories the run left in the workspace."""
    cancelled: bool = False
    started_at: float | None = None
    """time.monotonic() when the guest began (after queueing and runtime preparation):
    the watchdog's clock starts here."""
    install: Callable[[str], str] | None = None
    """Answers the guest's own install requests (`sandbox.install`: JSON in, JSON out); sessions only."""
    tools: Callable[[str], str] | None = None
    """Answers the guest's tool calls (code mode: JSON in, JSON out); None: the run was given no tools."""
    after: Callable[[], None] | None = None
    """Set by the provider: optional work for the worker once the result is delivered (the
    Runner does it while other jobs wait; the provider must not depend on it running)."""
    disk_room: int | None = None
    """The most the run may add to disk besides its limits (a quota shared beyond the session,
    reserved by the host for this run); None: only its limits."""
    images: KernelImages | None = None
    """Where the session's kernel snapshots are saved (restored when a kernel is made); sessions only."""
    printed: Callable[[], tuple[str, str]] | None = None
    """Set by the provider: the (stdout, stderr) the guest printed so far, for the result given
    for a guest still blocked in a host call past its deadline."""
    stop_due: Callable[[], LimitName | None] | None = None
    """Set by a provider whose guest no epoch check can stop (an epoch-free engine): the limit
    that should stop it now (its deadline passed, or a stop was asked: output, disk, cancel),
    else None. The worker process's supervisor polls it, and ends the process."""
    stopped_result: Callable[[LimitName], ExecResult] | None = None
    """Set with `stop_due`: the result for the guest stopped by that limit (what it printed and
    changed so far), given by whoever ends it."""
    _stoppers: list[Callable[[], None]] = field(default_factory=list)

    def on_cancel(self, stop: Callable[[], None]) -> None:
        """Register how to stop the running guest; called at once if already cancelled."""
        self._stoppers.append(stop)
        if self.cancelled:
            stop()

    def cancel(self) -> None:
        self.cancelled = True
        for stop in list(self._stoppers):
            stop()


class Provider(ABC):
    """An isolation technology: runs Jobs of the languages it names."""

    name: ClassVar[str]
    """How a request names it (`ExecRequest.provider`)."""
    languages: ClassVar[frozenset[str]]
    typechecker: Callable[[str, float, str], list[Diagnostic]] | None = None
    """Type-checks a TypeScript program (code, time limit, extra declarations) for `typecheck` requests;
    set by `default_providers` (the native provider's tsc)."""

    def run(self, job: Job) -> ExecResult:
        """`execute` (once per case with the `io` harness), preceded by the program's type
        check when the request asks for one. A run that holds brokered credentials has their
        secrets masked in what it streams and returns (egress/redaction.py)."""
        redactor = RunRedactor.for_request(job.request)
        if redactor is None:
            return self._run_checked(job)
        listener = job.listener
        if listener is not None:
            job.listener = redactor.listener(listener)
        try:
            result = self._run_checked(job)
        finally:
            job.listener = listener
            redactor.flush()
        return redactor.result(result)

    def _run_checked(self, job: Job) -> ExecResult:
        request = job.request
        if not request.typecheck:
            return self._run_harness(job)
        if self.typechecker is None:
            diagnostics = [Diagnostic(file="", line=0, column=0, code=0, category="checker",
                                      message="type checking needs the native provider's tsc "
                                              "(bubblewrap and `wasm-runner prepare`), which this Runner lacks")]
        else:
            declarations = ""
            if request.tool_specs:  # the run's tools, as the program sees them
                from wasm_runner.tools.stubs import typescript_stubs

                declarations = typescript_stubs(request.tool_specs)
            diagnostics = self.typechecker(request.code, request.typecheck_timeout_s, declarations)
        errors = [d for d in diagnostics if d.category in ("error", "checker")]
        if request.typecheck == "block" and errors:
            return blocked_by_typecheck(request, diagnostics, errors)
        result = self._run_harness(job)
        result.diagnostics = diagnostics
        return result

    def _run_harness(self, job: Job) -> ExecResult:
        if job.request.harness != "io":
            result = self.execute(job)
            result.group = job.request.group
            return result
        from wasm_runner.evaluation.io_cases import run_cases

        item = job.request

        def run_case(case: ExecRequest) -> ExecResult:
            if job.after is not None:  # the previous case's instance, restored for this one
                after, job.after = job.after, None
                after()
            job.request = case  # the watchdog's deadline is the case's
            return self.execute(job)

        try:
            return run_cases(item, run_case, lambda: job.cancelled)
        finally:
            job.request = item

    @abstractmethod
    def execute(self, job: Job) -> ExecResult:
        """Run the job to completion; every outcome, limit hits included, is an ExecResult."""

    def prepare(self) -> None:  # noqa: B027 - an optional hook: none by default
        """Build, compile or check whatever execution needs, ahead of the first request."""

    def ready(self, workspace: Workspace, language: str) -> bool:
        """Whether a one-shot run in this idle scratch workspace would start without waiting."""
        return True

    def prewarm(self, workspace: Workspace) -> None:  # noqa: B027 - an optional hook: none by default
        """Make sandboxes ahead for an idle scratch workspace's next one-shot run."""

    def discard(self, workspace: Workspace) -> None:  # noqa: B027 - an optional hook: none by default
        """Drop what `prewarm` made for a scratch workspace that goes away."""

    def use_scratch(self, directory: Path) -> None:  # noqa: B027 - an optional hook: none by default
        """Keep the provider's temporary files under `directory` (the Runner's own, removed when it closes)."""

    def use_packages(self, settings: PackageSettings) -> None:  # noqa: B027 - an optional hook: none by default
        """Take the Runner's package settings (where installs inside the provider's sandboxes come from)."""

    def close(self) -> None:  # noqa: B027 - an optional hook: none by default
        """Release what the provider holds (the Runner is closing)."""


def blocked_by_typecheck(request: ExecRequest, diagnostics: list[Diagnostic], errors: list[Diagnostic]) -> ExecResult:
    """The result of a `typecheck: "block"` program that did not run: its findings, and the first as the error."""
    first = errors[0]
    where = f"line {first.line}: " if first.line else ""
    message = f"{len(errors)} type error{'s' if len(errors) > 1 else ''}, the program did not run; {where}{first.message}"
    return ExecResult(exit_code=1, language=request.language, id=request.id, group=request.group,
                      diagnostics=diagnostics,
                      error=GuestError(type="TypeCheckError", message=message, traceback="",
                                       line=first.line or None, hint="fix the findings in `diagnostics`, or "
                                       "send typecheck: true to run the program whatever they are"))
