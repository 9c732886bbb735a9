"""The core's exceptions, all under `WasmRunnerError` (shared with the client).

Each also keeps the built-in base it was raised as before (ValueError, RuntimeError), so
`except ValueError` around a Runner call still catches an invalid request.
"""

from __future__ import annotations

from wasm_runner_protocol.errors import WasmRunnerError

__all__ = [
    "InvalidMountError", "InvalidRequestError", "InvalidSessionIdError", "NoProviderError", "RunnerClosedError",
    "RuntimeUnavailableError", "SandboxPolicyError", "WasmRunnerError",
]


class InvalidRequestError(WasmRunnerError, ValueError):
    """The caller asked for something the Runner cannot do as asked."""


class NoProviderError(InvalidRequestError):
    """No provider of this Runner runs the request's language (or the provider it names)."""


class InvalidSessionIdError(InvalidRequestError):
    """A session id outside the rule of `wasm_runner_protocol.guest.is_session_id`."""


class InvalidMountError(InvalidRequestError):
    """A mount whose guest path is not allowed (see `wasm_runner_protocol.guest.check_guest_path`)."""


class SandboxPolicyError(InvalidRequestError):
    """A native sandbox policy out of its bounds."""


class RunnerClosedError(WasmRunnerError, RuntimeError):
    """The Runner was closed: it runs nothing more."""


class RuntimeUnavailableError(WasmRunnerError, RuntimeError):
    """A guest runtime is not installed or not built as pinned; the message says what to do."""
