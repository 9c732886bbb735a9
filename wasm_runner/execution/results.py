"""The results the host gives for an execution whose guest gave none."""

from __future__ import annotations

from wasm_runner_protocol.execution import ExecRequest, ExecResult, GuestError

__all__ = ["host_error_result", "invalid_request_result", "lost_result", "stuck_result"]


def stuck_result(request: ExecRequest) -> ExecResult:
    """The guest was blocked in a host call past its deadline; its worker was given up."""
    return ExecResult(
        exit_code=137, limit="timeout", language=request.language, id=request.id,
        error=GuestError(type="LimitExceeded", message="stopped at the wall-clock deadline "
                         "(the guest was blocked in a host call)"),
    )


def lost_result(request: ExecRequest, exit_code: int | None) -> ExecResult:
    """The worker process running it exited before answering."""
    return ExecResult(exit_code=1, id=request.id, language=request.language, error=GuestError(
        type="HostError", message=f"the worker process running this exited (code {exit_code}); "
                                  "it did not finish: run it again"))


def invalid_request_result(request: ExecRequest, exc: Exception) -> ExecResult:
    """No provider runs it (a batch item answers instead of raising)."""
    return ExecResult(exit_code=2, id=request.id, language=request.language,
                      error=GuestError(type="InvalidRequest", message=str(exc)))


def host_error_result(request: ExecRequest, exc: Exception) -> ExecResult:
    """The host failed around the item (a batch item's failure is its result)."""
    return ExecResult(exit_code=1, id=request.id, language=request.language,
                      error=GuestError(type="HostError", message=f"the item could not run: {exc}"))
