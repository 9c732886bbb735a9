"""The results the host gives for an execution whose guest gave none."""

from __future__ import annotations

from wasm_runner.egress.redaction import redact_result
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecRequest, ExecResult, GuestError

__all__ = ["host_error_result", "invalid_request_result", "killed_at_deadline_result", "lost_result", "no_worker_result",
           "stuck_result"]


def stuck_result(request: ExecRequest, stdout: str = "", stderr: str = "") -> ExecResult:
    """The guest was blocked in a host call past its deadline; its worker was given up. The
    output it printed until then is kept (its credentials' secrets masked)."""
    return redact_result(request, ExecResult(
        stdout=stdout, stderr=stderr, exit_code=137, limit="timeout", language=request.language,
        id=request.id, group=request.group,
        error=GuestError(type="LimitExceeded", message="stopped at the wall-clock deadline "
                         "(the guest was blocked in a host call)"),
    ))


def killed_at_deadline_result(request: ExecRequest) -> ExecResult:
    """The worker process running it did not answer past its deadline and was ended (what it
    printed went with the process)."""
    return ExecResult(exit_code=137, limit="timeout", language=request.language, id=request.id, group=request.group,
                      verdict="timeout" if request.harness == "check" else None,
                      error=GuestError(type="LimitExceeded", message=f"{LIMIT_MESSAGES['timeout']} (its worker "
                                       "process did not answer and was ended)"))


def lost_result(request: ExecRequest, exit_code: int | None, why: str = "") -> ExecResult:
    """The worker process running it exited before answering."""
    cause = f"exited (code {exit_code})" if exit_code is None or exit_code >= 0 else f"was killed (signal {-exit_code})"
    return ExecResult(exit_code=1, id=request.id, group=request.group, language=request.language, error=GuestError(
        type="HostError", message=f"the worker process running this {cause}{why}; it did not finish "
                                  "and may be retried: run it again"))


def invalid_request_result(request: ExecRequest, exc: Exception) -> ExecResult:
    """No provider runs it (a batch item answers instead of raising)."""
    return ExecResult(exit_code=2, id=request.id, group=request.group, language=request.language,
                      error=GuestError(type="InvalidRequest", message=str(exc)))


def host_error_result(request: ExecRequest, exc: Exception) -> ExecResult:
    """The host failed around the item (a batch item's failure is its result)."""
    return ExecResult(exit_code=1, id=request.id, group=request.group, language=request.language,
                      error=GuestError(type="HostError", message=f"the item could not run: {exc}"))


def no_worker_result(request: ExecRequest) -> ExecResult:
    """No worker process could start, and the Runner runs no guest in its own process."""
    return ExecResult(exit_code=1, id=request.id, group=request.group, language=request.language, error=GuestError(
        type="HostError", message="no worker process could start to run this (the log says why); a Runner with "
                                  "isolation='process' runs no guest in the calling process (for trusted code, "
                                  "Runner(isolation='in-process') does)"))
