"""One wasmtime Engine per settings combination, shared by the whole process.

A compiled module only loads into an engine with the same settings, so engines
are keyed by the settings that change code generation (fuel metering, epoch
checks). An engine with epoch interruption has one daemon thread advancing its
epoch. Epoch checks at every loop back-edge cost CPU-bound guests 20-30 %: a
process whose guests a supervisor can stop by ending the process (a worker
process) turns them off for all its engines (`use_epoch_free_engines`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import wasmtime

EPOCH_TICK_S = 0.010
"""Epoch period: how often a running guest's interrupt check runs (deadline precision)."""

WASM_STACK_BYTES = 1024 * 1024  # must stay below wasmtime's async stack (2 MiB)
"""Deep but bounded guest recursion; overflowing it is a `stack` limit result."""

_epoch = True
"""Whether this process's engines check an epoch deadline (see `use_epoch_free_engines`)."""
_thread = threading.local()


def epoch_interruption() -> bool:
    """Whether guests started on this thread now are stopped by epoch checks (else only by
    ending the process): the process's choice, unless the thread is inside `epoch_checks`."""
    return _epoch or getattr(_thread, "epoch", False)


@contextlib.contextmanager
def epoch_checks() -> Iterator[None]:
    """Within: this thread's guests run on engines with epoch interruption, whatever the
    process's choice (for work a supervisor's kill would cut short of its other parts)."""
    outer = getattr(_thread, "epoch", False)
    _thread.epoch = True
    try:
        yield
    finally:
        _thread.epoch = outer


@dataclass(frozen=True)
class EngineSettings:
    fuel: bool = False
    epoch: bool = field(default_factory=epoch_interruption)
    """Epoch interruption (a deadline check at every loop back-edge and call)."""

    def cache_key(self) -> str:
        return f"{'epoch' if self.epoch else 'noepoch'}-fuel{int(self.fuel)}-stack{WASM_STACK_BYTES}"


_engines: dict[EngineSettings, wasmtime.Engine] = {}
_lock = threading.Lock()


def use_epoch_free_engines() -> None:
    """Make every engine of this process run without epoch interruption: a guest in a CPU loop
    then cannot be trapped, and only ending the process stops it. For a worker process whose
    supervisor does that at the deadline (see `execution.worker_main`)."""
    global _epoch
    with _lock:
        _epoch = False


def get_engine(settings: EngineSettings | None = None) -> wasmtime.Engine:
    settings = settings or EngineSettings()
    with _lock:
        engine = _engines.get(settings)
        if engine is None:
            config = wasmtime.Config()
            config.epoch_interruption = settings.epoch
            config.consume_fuel = settings.fuel
            config.max_wasm_stack = WASM_STACK_BYTES
            engine = wasmtime.Engine(config)
            _engines[settings] = engine
            if settings.epoch:
                threading.Thread(target=_tick, args=(engine,), name="wasm-epoch", daemon=True).start()
        return engine


def _tick(engine: wasmtime.Engine) -> None:
    wait = threading.Event().wait
    while True:
        wait(EPOCH_TICK_S)
        engine.increment_epoch()
