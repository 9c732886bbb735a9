"""Per-store interruption: deadline, cancellation and host-detected limits.

wasmtime's epoch is engine-wide; what decides whether one store stops is the
callback run when its deadline tick passes. wasmtime-py exposes no wrapper for
`wasmtime_store_epoch_deadline_callback`, so this module registers it through
`lowlevel.capi`. The callback runs on the guest's
thread at every epoch tick (10 ms) and either lets the guest continue for one
more tick or traps it with a message naming the reason.
"""

from __future__ import annotations

import threading
import time
from enum import Enum
from typing import Any

import wasmtime

from wasm_runner.lowlevel.capi import DEADLINE_CONTINUE, EpochDeadlineCallback, new_error, set_epoch_deadline_callback

TRAP_PREFIX = "wasm-runner stop: "


class StopReason(str, Enum):  # noqa: UP042 - a StrEnum would change what str() of a member gives
    timeout = "timeout"
    cancelled = "cancelled"
    output = "output"
    disk = "disk"


class Interrupt:
    """Stop conditions for whatever runs in one store; re-armed for every call.

    `stop()` may be called from any thread; the guest traps at the next tick. Each
    `arm()` starts a new call: a stop aimed at an earlier call (by its number) is
    ignored, so a late cancellation never reaches whatever runs in the store next.
    """

    def __init__(self, store: wasmtime.Store) -> None:
        self.deadline = float("inf")
        self.reason: StopReason | None = None
        self.call = 0
        self._lock = threading.Lock()
        self._callback = EpochDeadlineCallback(self._on_tick)  # kept alive as long as the store
        set_epoch_deadline_callback(store, self._callback)
        store.set_epoch_deadline(1)

    def arm(self, store: wasmtime.Store, timeout_s: float) -> int:
        """Start a call; returns its number."""
        with self._lock:
            self.call += 1
            self.reason = None
            self.deadline = time.monotonic() + timeout_s
        store.set_epoch_deadline(1)
        return self.call

    def stop(self, reason: StopReason, call: int | None = None) -> None:
        """Stop the current call (or only call number `call`, if it is still the current one)."""
        with self._lock:
            if self.reason is None and call in (None, self.call):
                self.reason = reason

    def expired(self) -> bool:
        """Record and report whether the deadline has passed (used after a blocking call)."""
        if time.monotonic() >= self.deadline:
            self.stop(StopReason.timeout)
        return self.reason is not None

    def _on_tick(self, _context: Any, _data: Any, delta: Any, kind: Any) -> int:  # ctypes callback arguments
        if self.reason is None and time.monotonic() >= self.deadline:
            self.stop(StopReason.timeout)
        if self.reason is not None:
            return new_error(f"{TRAP_PREFIX}{self.reason.value}".encode())
        delta[0] = 1
        kind[0] = DEADLINE_CONTINUE
        return 0


def stop_reason_in(message: str) -> StopReason | None:
    """The reason an Interrupt trapped a guest, read back from the trap's message."""
    at = message.find(TRAP_PREFIX)
    if at < 0:
        return None
    word = message[at + len(TRAP_PREFIX):].split()[0].strip(".,:;")
    try:
        return StopReason(word)
    except ValueError:
        return None
