"""The `io` harness: run a program once per test case with the case's stdin and judge its stdout.

Competitive-programming suites judge a program by what it prints for given input. Each case
runs as its own one-shot execution (a fresh instance, the case's time limit) through the
provider that runs the item, so every limit holds per case; the host compares the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec

from wasm_runner_protocol.execution import CaseResult, ExecRequest, ExecResult, GuestError

__all__ = ["case_verdict", "outputs_match", "run_cases"]

EXCERPT_CHARS = 200
"""How much of the expected and actual output a wrong answer's message quotes."""


def _tokens_match(actual: list[str], expected: list[str], tolerance: float | None) -> bool:
    if len(actual) != len(expected):
        return False
    for got, want in zip(actual, expected, strict=True):
        if got == want:
            continue
        if tolerance is None:
            return False
        try:
            a, b = float(got), float(want)
        except ValueError:
            return False
        if math.isnan(a) or math.isnan(b) or not math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance):
            return False
    return True


def outputs_match(actual: str, expected: str, compare: str = "exact", tolerance: float = 1e-6) -> bool:
    """`exact`: equal strings; `whitespace`: equal whitespace-separated tokens; `numeric`: tokens
    equal, or both numbers within `tolerance` (absolute or relative)."""
    if compare == "exact":
        return actual == expected
    return _tokens_match(actual.split(), expected.split(), tolerance if compare == "numeric" else None)


def case_verdict(result: ExecResult, case_expected: str, request: ExecRequest) -> str:
    """One case's verdict, in the harnesses' one vocabulary."""
    if result.limit == "timeout":
        return "timeout"
    if result.limit is not None:
        return "limit"
    if result.error is not None or result.exit_code != 0:
        return "error"
    return "passed" if outputs_match(result.stdout, case_expected, request.compare, request.tolerance) else "failed"


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…")


def run_cases(request: ExecRequest, run_case: Callable[[ExecRequest], ExecResult],
              cancelled: Callable[[], bool]) -> ExecResult:
    """Run every case of an `io` request through `run_case` (one script execution each) and
    give the item's result: the first failing case's output and verdict, every case's verdict.
    A cancelled item stops before its next case."""
    cases: list[CaseResult] = []
    first_failure: ExecResult | None = None
    failed_case: int | None = None
    last: ExecResult | None = None
    duration = 0.0
    for index, case in enumerate(request.cases):
        if cancelled():
            break
        limits = request.limits
        if case.timeout_s is not None:
            limits = msgspec.structs.replace(limits, timeout_s=case.timeout_s)
        case_request = msgspec.structs.replace(request, harness="script", cases=[], stdin=case.stdin, limits=limits)
        result = run_case(case_request)
        verdict = case_verdict(result, case.expected, request)
        duration += result.duration_ms
        cases.append(CaseResult(verdict=verdict, exit_code=result.exit_code, limit=result.limit,  # type: ignore[arg-type]
                                duration_ms=result.duration_ms))
        last = result
        if verdict != "passed" and first_failure is None:
            if verdict == "failed":
                result.error = GuestError(
                    type="WrongAnswer",
                    message=f"case {index}: expected {_excerpt(case.expected)}, got {_excerpt(result.stdout)} "
                            f"(compare: {request.compare})")
                result.exit_code = 1
            first_failure, failed_case = result, index
    if last is None:  # cancelled before the first case
        return ExecResult(exit_code=137, limit="cancelled", verdict="limit", language=request.language,
                          id=request.id, group=request.group, cases=[],
                          error=GuestError(type="LimitExceeded", message="cancelled by the caller"))
    shown = first_failure or last
    if len(cases) < len(request.cases) and first_failure is None:  # cancelled between cases
        shown.limit = "cancelled"
        shown.exit_code = 137
    shown.verdict = cases[failed_case].verdict if failed_case is not None else (
        "limit" if shown.limit == "cancelled" else "passed")
    shown.cases = cases
    shown.failed_case = failed_case
    shown.duration_ms = round(duration, 3)
    shown.id = request.id
    shown.group = request.group
    return shown

