"""How long one request's file work may run (see `Budget`)."""

from __future__ import annotations

import math
import threading
import time

from wasm_runner.workspace.file_errors import BudgetExceededError, OperationCancelledError


class Budget:
    """How long one request's file work may run, and whether the one who asked is still there.

    The loops of glob, grep, edit, patch and archive call `check`: past the deadline it
    raises BudgetExceededError, after `cancel` (the client went away) OperationCancelledError.
    `cancel` may be called from another thread (the event loop) while a worker thread checks.
    """

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = seconds
        self.deadline = math.inf
        self._cancelled = threading.Event()
        self.restart()

    def restart(self) -> None:
        """Start a new period of `seconds` (a streamed archive has one per chunk it produces)."""
        if self.seconds is not None:
            self.deadline = time.monotonic() + self.seconds

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def check(self, what: str, path: str = "", hint: str | None = None) -> None:
        if self._cancelled.is_set():
            raise OperationCancelledError(path, f"{what} was stopped: the request was cancelled")
        if time.monotonic() > self.deadline:
            raise BudgetExceededError(path, f"{what} took longer than its budget of {self.seconds:g} s", hint)
