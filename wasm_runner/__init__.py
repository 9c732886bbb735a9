"""wasm-runner: run untrusted Python, JavaScript and TypeScript in WebAssembly with hard limits."""

from wasm_runner.capture import OutputListener
from wasm_runner.errors import (
    InvalidMountError,
    InvalidRequestError,
    InvalidSessionIdError,
    NoProviderError,
    RunnerClosedError,
    RuntimeUnavailableError,
    SandboxPolicyError,
    WasmRunnerError,
)
from wasm_runner.execution.containment import WorkerPolicy
from wasm_runner.guest import Mount
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.runner import Runner
from wasm_runner.session import Session
from wasm_runner_protocol import __version__ as __version__
from wasm_runner_protocol.execution import Diagnostic, ExecRequest, ExecResult, FileChanges, GuestError, Limits, RichOutput

__all__ = [
    "Diagnostic",
    "ExecRequest",
    "ExecResult",
    "FileChanges",
    "GuestError",
    "InvalidMountError",
    "InvalidRequestError",
    "InvalidSessionIdError",
    "Limits",
    "Mount",
    "NoProviderError",
    "OutputListener",
    "PackageSettings",
    "RichOutput",
    "Runner",
    "RunnerClosedError",
    "RuntimeUnavailableError",
    "SandboxPolicyError",
    "Session",
    "WasmRunnerError",
    "WorkerPolicy",
]
