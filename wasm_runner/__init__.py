"""wasm-runner: run untrusted Python and JavaScript in WebAssembly with hard limits."""

from .api import ExecRequest, ExecResult, FileChanges, GuestError, Limits
from .capture import OutputListener
from .providers.wasm.sandbox import Mount
from .runner import Runner, Session

__all__ = [
    "ExecRequest",
    "ExecResult",
    "FileChanges",
    "GuestError",
    "Limits",
    "Mount",
    "OutputListener",
    "Runner",
    "Session",
]
