"""wasmtime engines, the compiled-module cache and per-store interruption."""

from wasm_runner.engine.engines import (
    EngineSettings,
    epoch_checks,
    epoch_interruption,
    get_engine,
    use_epoch_free_engines,
)
from wasm_runner.engine.interrupt import Interrupt, StopReason
from wasm_runner.engine.module_cache import cache_dir, load_compiled

__all__ = ["EngineSettings", "Interrupt", "StopReason", "cache_dir", "epoch_checks", "epoch_interruption", "get_engine",
           "load_compiled", "use_epoch_free_engines"]
