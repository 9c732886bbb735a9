"""wasm-runner: run untrusted Python and JavaScript in WebAssembly with hard limits."""

from wasm_runner.capture import OutputListener
from wasm_runner.providers.wasm.sandbox import Mount
from wasm_runner.runner import Runner, Session
from wasm_runner_protocol import __version__ as __version__
from wasm_runner_protocol.execution import ExecRequest, ExecResult, FileChanges, GuestError, Limits

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
