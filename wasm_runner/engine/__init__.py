"""wasmtime engines, the compiled-module cache and per-store interruption."""

from .engines import EngineSettings, get_engine
from .interrupt import Interrupt, StopReason
from .module_cache import cache_dir, load_compiled

__all__ = ["EngineSettings", "Interrupt", "StopReason", "cache_dir", "get_engine", "load_compiled"]
