"""What a WASI guest sees and how one call into it is set up and read back.

Shared by the Python and JavaScript runtimes: the store with its limits and
interrupt, the WASI view (preopens, allowlisted environment, captured output),
and the mapping from a trap to the limit that caused it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wasmtime

from wasm_runner.capture import Capture, OutputListener
from wasm_runner.engine import EngineSettings, Interrupt, StopReason, get_engine
from wasm_runner.engine.interrupt import stop_reason_in
from wasm_runner.guest import Mount
from wasm_runner.lowlevel.output import Sink, route_output
from wasm_runner_protocol.execution import LIMIT_MESSAGES, GuestError, LimitName, Limits, RichOutput
from wasm_runner_protocol.guest import GUEST_TMP, GUEST_WORKSPACE

BASE_ENV: dict[str, str] = {
    "HOME": GUEST_WORKSPACE,
    "PWD": GUEST_WORKSPACE,
    "TMPDIR": GUEST_TMP,
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "USER": "sandbox",
    "PYTHONIOENCODING": "utf-8",
}
"""The whole environment a guest sees, besides variables the caller passes."""


@dataclass(frozen=True)
class View:
    """The host directories a guest may touch; nothing else of the host is visible."""

    workspace: Path
    tmp: Path
    mounts: tuple[Mount, ...] = ()

    def __hash__(self) -> int:
        # A view keys the warm pool's tables several times a run; hashing its paths each
        # time cost more than the lookups.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.workspace, self.tmp, self.mounts))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def preopens(self) -> list[str]:
        """The guest paths of its preopens, in the order the guest's descriptors take them."""
        return [GUEST_WORKSPACE, GUEST_TMP] + [f"{m.guest}:{'rw' if m.writable else 'ro'}" for m in self.mounts]

    def configure(self, wasi: wasmtime.WasiConfig) -> None:
        wasi.preopen_dir(str(self.workspace), GUEST_WORKSPACE, True)
        wasi.preopen_dir(str(self.tmp), GUEST_TMP, True)
        for mount in self.mounts:
            wasi.preopen_dir(str(mount.host), mount.guest, mount.writable)


def guest_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(BASE_ENV)
    env.update(extra)
    return env


class OutputRouter:
    """Routes a store's stdout/stderr to the capture of the call in progress.

    A kernel's store lives across calls, while captures belong to one call.
    With the compiled output sink (`lowlevel.output`), a call's writes are kept in C and
    handed to its capture when the call ends; a capture that streams to a listener, or
    that the writes would overflow, gets them as they come, through a Python callback.
    """

    def __init__(self) -> None:
        self._captures: list[Capture | None] = [None, None]
        self._sinks: tuple[Sink, Sink] | None = None

    def attach(self, wasi: wasmtime.WasiConfig) -> None:
        self._sinks = route_output(wasi, self)

    @staticmethod
    def _capture_of(stream: int) -> property:  # a property factory, used in the class body
        return property(lambda self: self._captures[stream], lambda self, capture: self._switch(stream, capture),
                        doc="The capture of the call in progress (None between calls).")

    stdout = _capture_of(0)
    stderr = _capture_of(1)
    del _capture_of

    def _switch(self, stream: int, capture: Capture | None) -> None:
        """The previous capture gets what its call wrote; the new one is set up for its call."""
        if self._sinks is not None:
            sink, previous = self._sinks[stream], self._captures[stream]
            kept = sink.take()
            if previous is not None and kept:
                previous.write(kept)
            if capture is None:
                sink.configure(0, True)
            else:
                sink.configure(capture.room, capture.streams)
        self._captures[stream] = capture

    def write(self, stream: int, data: bytes) -> None:
        capture = self._captures[stream]
        if capture is not None:
            capture.write(data)

    def flush(self) -> None:
        """Hand the captures what the sinks kept so far (from any thread: a call given up
        while its guest is blocked in a host call still reports what it printed)."""
        if self._sinks is not None:
            for stream, sink in enumerate(self._sinks):
                capture, kept = self._captures[stream], sink.take()
                if capture is not None and kept:
                    capture.write(kept)


@dataclass
class Call:
    """One execution in a guest: its inputs and the capture of its outputs."""

    code: str
    limits: Limits
    stdin: str = ""
    env: dict[str, str] = field(default_factory=dict)
    listener: OutputListener | None = None
    filename: str | None = None
    tests: str | None = None
    """With the check harness, on a runtime that runs program and tests in one call."""
    cwd: str = GUEST_WORKSPACE
    """The guest's working directory (the session's, e.g. /workspace/analyst/s1 on a member's disk)."""
    stdout: Capture = None  # type: ignore[assignment]  # None given: __post_init__ makes the call's own
    """Captures may be shared by calls that make up one execution (the check harness)."""
    stderr: Capture = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.interrupt: Interrupt | None = None
        self.number = 0
        self.successor: Call | None = None
        """The next call of the same execution (the check harness's tests): stops reach it too."""
        self.stopped: StopReason | None = None
        self.collect: Callable[[], None] | None = None
        """Set by the kernel running the call: moves what the guest printed so far into the
        captures (used only when the call is given up, its guest blocked in a host call)."""
        if self.stdout is None:
            self.stdout = Capture("stdout", self.limits.output_bytes, self._overflow, self.listener)
        if self.stderr is None:
            self.stderr = Capture("stderr", self.limits.output_bytes, self._overflow, self.listener)
        self.stdout.on_overflow = self.stderr.on_overflow = self._overflow

    def _overflow(self) -> None:
        self.stop(StopReason.output)

    def bind(self, interrupt: Interrupt, store: wasmtime.Store) -> None:
        """Arm the store's interrupt for this call; a stop requested earlier applies at once."""
        self.number = interrupt.arm(store, self.limits.timeout_s)
        self.interrupt = interrupt
        if self.stopped is not None:
            interrupt.stop(self.stopped, self.number)

    def stop(self, reason: StopReason) -> None:
        """Stop the guest running this call (from any thread), or keep it from starting;
        once the call is over, its store may run another call, which this does not touch."""
        self.stopped = self.stopped or reason
        if self.interrupt is not None:
            self.interrupt.stop(reason, self.number)
        if self.successor is not None:
            self.successor.stop(reason)


@dataclass
class Outcome:
    """What the guest did, before the workspace and timing are added."""

    exit_code: int = 0
    value: str | None = None
    error: GuestError | None = None
    limit: LimitName | None = None
    fuel_used: int | None = None
    memory_peak_bytes: int | None = None
    instance_lost: bool = False
    """The instance trapped and cannot be entered again (a kernel must be rebuilt)."""
    phase: str | None = None
    """With the check harness: `program` or `tests`, the part that produced this outcome."""
    outputs: list[RichOutput] = field(default_factory=list)
    """Rich outputs (displayed objects, the last expression), in order."""


def engine_settings(limits: Limits) -> EngineSettings:
    return EngineSettings(fuel=limits.fuel is not None)


def new_store(limits: Limits, settings: EngineSettings | None = None) -> tuple[wasmtime.Store, Interrupt]:
    """A store with the limits set, on the engine of `settings` (by default: the limits' own,
    with this thread's epoch choice), and its interrupt."""
    settings = settings or engine_settings(limits)
    store = wasmtime.Store(get_engine(settings))
    store.set_limits(memory_size=limits.memory_bytes)
    if limits.fuel is not None:
        store.set_fuel(limits.fuel)
    return store, Interrupt(store)


_closing: queue.SimpleQueue[tuple[wasmtime.Store, contextlib.AbstractContextManager[Any]]] = queue.SimpleQueue()
_unclosed = 0
_all_closed = threading.Condition()


def _close_stores() -> None:
    global _unclosed
    while True:
        store, guard = _closing.get()
        with guard:
            store.close()
        with _all_closed:
            _unclosed -= 1
            _all_closed.notify_all()


def close_later(store: wasmtime.Store, guard: contextlib.AbstractContextManager[Any] | None = None) -> None:
    """Release a finished store off the caller's path (unmapping an instance takes ~1 ms).

    Closing also releases WASI handles the guest left open. `guard` is held while the
    store closes (no memory is unmapped while someone locates a new instance's).
    """
    global _unclosed
    with _all_closed:
        _unclosed += 1
    _closing.put((store, guard or contextlib.nullcontext()))


def wait_closed(timeout: float = 15.0) -> None:
    """Wait until the stores handed to `close_later` are released, so that the process
    does not exit while a thread is inside wasmtime."""
    with _all_closed:
        _all_closed.wait_for(lambda: _unclosed == 0, timeout)


threading.Thread(target=_close_stores, name="wasm-store-close", daemon=True).start()


def trap_outcome(exc: Exception, interrupt: Interrupt) -> Outcome:
    """Turn a trap into a result; an interrupt we raised names its own limit."""
    message = str(exc)
    reason = interrupt.reason or stop_reason_in(message)
    limit: LimitName | None = None
    if reason is not None:
        limit = reason.value
    elif "all fuel consumed" in message or "OutOfFuel" in message:
        limit = "fuel"
    elif "call stack exhausted" in message or "stack overflow" in message:
        limit = "stack"
    elif "memory" in message and ("out of" in message or "grow" in message):
        limit = "memory"
    if limit is not None:
        return Outcome(exit_code=137, limit=limit, instance_lost=True, error=GuestError(
            type="LimitExceeded", message=LIMIT_MESSAGES[limit]))
    cause = message.strip().splitlines()[-1] if message.strip() else type(exc).__name__
    return Outcome(exit_code=134, instance_lost=True,
                   error=GuestError(type="GuestCrash", message=f"the guest crashed: {cause}", traceback=message[-4000:]))
