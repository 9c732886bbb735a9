"""An MCP tool's result text says when the call waited for its turn (the service was busy)."""

from __future__ import annotations

from wasm_runner import ExecResult
from wasm_runner_server.mcp.describe import describe


def test_a_call_that_queued_says_how_long_and_one_that_did_not_says_nothing() -> None:
    waited = describe(ExecResult(exit_code=0, stdout="1\n", duration_ms=3.0, queued_ms=2105.4), "s1")
    assert "exit code 0, 3 ms, session s1; waited 2105 ms for its turn (the service was busy)" in waited
    at_once = describe(ExecResult(exit_code=0, stdout="1\n", duration_ms=3.0), "s1")
    assert "waited" not in at_once
