"""One wasmtime Engine per settings combination, shared by the whole process.

A compiled module only loads into an engine with the same settings, so engines
are keyed by the settings that change code generation (fuel metering). Every
engine has epoch interruption on and one daemon thread advancing its epoch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import wasmtime

EPOCH_TICK_S = 0.010
"""Epoch period: how often a running guest's interrupt check runs (deadline precision)."""

WASM_STACK_BYTES = 1024 * 1024  # must stay below wasmtime's async stack (2 MiB)
"""Deep but bounded guest recursion; overflowing it is a `stack` limit result."""


@dataclass(frozen=True)
class EngineSettings:
    fuel: bool = False

    def cache_key(self) -> str:
        return f"epoch-fuel{int(self.fuel)}-stack{WASM_STACK_BYTES}"


_engines: dict[EngineSettings, wasmtime.Engine] = {}
_lock = threading.Lock()


def get_engine(settings: EngineSettings = EngineSettings()) -> wasmtime.Engine:
    with _lock:
        engine = _engines.get(settings)
        if engine is None:
            config = wasmtime.Config()
            config.epoch_interruption = True
            config.consume_fuel = settings.fuel
            config.max_wasm_stack = WASM_STACK_BYTES
            engine = wasmtime.Engine(config)
            _engines[settings] = engine
            threading.Thread(target=_tick, args=(engine,), name="wasm-epoch", daemon=True).start()
        return engine


def _tick(engine: wasmtime.Engine) -> None:
    wait = threading.Event().wait
    while True:
        wait(EPOCH_TICK_S)
        engine.increment_epoch()
