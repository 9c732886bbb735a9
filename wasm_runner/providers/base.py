"""The Provider protocol: how a session's execution reaches an isolation technology."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from wasm_runner.capture import OutputListener
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.execution import ExecRequest, ExecResult


@dataclass
class Job:
    """One execution handed to a provider, run on a worker thread."""

    request: ExecRequest
    workspace: Workspace
    kernels: dict[str, Any] | None = None
    """The session's live kernels by language (the provider owns their contents); None for one-shot runs."""
    listener: OutputListener | None = None
    mounts: tuple = ()
    """Extra directories for this session only (wasm: `Mount`s), besides the provider's own."""
    scratch: bool = False
    """The workspace is a one-shot scratch directory, known to exist and to be empty."""
    left_entries: int | None = None
    """Set by the provider: how many files and directories the run left in the workspace."""
    cancelled: bool = False
    started_at: float | None = None
    """time.monotonic() when the guest began (after queueing and runtime preparation):
    the watchdog's clock starts here."""
    after: Callable[[], None] | None = None
    """Set by the provider: optional work for the worker once the result is delivered (the
    Runner does it while other jobs wait; the provider must not depend on it running)."""
    _stoppers: list = field(default_factory=list)

    def on_cancel(self, stop) -> None:
        """Register how to stop the running guest; called at once if already cancelled."""
        self._stoppers.append(stop)
        if self.cancelled:
            stop()

    def cancel(self) -> None:
        self.cancelled = True
        for stop in list(self._stoppers):
            stop()


class Provider(Protocol):
    name: str
    languages: frozenset[str]

    def execute(self, job: Job) -> ExecResult:
        """Run the job to completion; every outcome, limit hits included, is an ExecResult."""
        ...

    def prepare(self) -> None:
        """Build, compile or check whatever execution needs, ahead of the first request."""
        ...
