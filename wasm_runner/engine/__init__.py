"""wasmtime engines, the compiled-module cache and per-store interruption."""

from wasm_runner.engine.engines import EngineSettings, get_engine
from wasm_runner.engine.interrupt import Interrupt, StopReason
from wasm_runner.engine.module_cache import cache_dir, load_compiled

__all__ = ["EngineSettings", "Interrupt", "StopReason", "cache_dir", "get_engine", "load_compiled"]
