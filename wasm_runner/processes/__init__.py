"""Processes that outlive a call: a session's background processes and terminals (native tier)."""

from wasm_runner.processes.manager import (
    BackgroundProcess,
    ProcessError,
    ProcessesClosed,
    ProcessLimitError,
    ProcessLimits,
    ProcessManager,
    ProcessNotFound,
)
from wasm_runner.processes.ring import Chunk, OutputRing

__all__ = ["BackgroundProcess", "Chunk", "OutputRing", "ProcessError", "ProcessLimitError", "ProcessLimits",
           "ProcessManager", "ProcessNotFound", "ProcessesClosed"]
