"""The `io` harness: stdin in, stdout judged per case (exact, whitespace, numeric tolerance)."""

import time

import pytest

from wasm_runner import ExecRequest, Limits
from wasm_runner.evaluation.io_cases import outputs_match
from wasm_runner_protocol.execution import IoCase

DIVIDE = "import sys\na, b = map(float, sys.stdin.read().split())\nprint(a / b)"


@pytest.mark.parametrize(("actual", "expected", "compare", "matches"), [
    ("3\n", "3\n", "exact", True),
    ("3\n", "3", "exact", False),
    ("1  2\n3\n\n", "1 2 3", "whitespace", True),
    ("1 2", "1 2 3", "whitespace", False),
    ("0.3333333\n", "0.333333", "numeric", True),
    ("0.3334", "0.333333", "numeric", False),
    ("1e6 yes", "1000000.0000001 yes", "numeric", True),
    ("nan", "nan", "numeric", True),  # equal as text
    ("nan", "1", "numeric", False),
    ("abc", "abd", "numeric", False),
])
def test_comparisons(actual, expected, compare, matches):
    assert outputs_match(actual, expected, compare, 1e-6) is matches


def test_io_request_needs_cases():
    with pytest.raises(ValueError, match="at least one case"):
        ExecRequest(code="print(1)", harness="io")
    with pytest.raises(ValueError, match="harness io only"):
        ExecRequest(code="print(1)", cases=[IoCase(expected="1")])


def test_every_case_passes(runner):
    cases = [IoCase(stdin="1 4", expected="0.25\n"), IoCase(stdin="9 3", expected="3.0\n")]
    result = runner.run_sync(ExecRequest(code=DIVIDE, harness="io", cases=cases, id="a", group="t1"))
    assert result.verdict == "passed"
    assert [c.verdict for c in result.cases] == ["passed", "passed"]
    assert result.failed_case is None
    assert (result.id, result.group) == ("a", "t1")


def test_first_failing_case_is_reported_with_its_output(runner):
    cases = [IoCase(stdin="1 4", expected="0.25\n"), IoCase(stdin="1 3", expected="0.333333"),
             IoCase(stdin="1 0", expected="inf"), IoCase(stdin="2 1", expected="2.0\n")]
    exact = runner.run_sync(ExecRequest(code=DIVIDE, harness="io", cases=cases))
    assert [c.verdict for c in exact.cases] == ["passed", "failed", "error", "passed"]
    assert (exact.verdict, exact.failed_case) == ("failed", 1)
    assert exact.stdout == "0.3333333333333333\n"  # the failing case's own output
    assert exact.error.type == "WrongAnswer" and "case 1" in exact.error.message

    tolerant = runner.run_sync(ExecRequest(code=DIVIDE, harness="io", cases=cases, compare="numeric", tolerance=1e-5))
    assert [c.verdict for c in tolerant.cases] == ["passed", "passed", "error", "passed"]
    assert (tolerant.verdict, tolerant.failed_case) == ("error", 2)
    assert tolerant.error.type == "ZeroDivisionError"


def test_whitespace_comparison_ignores_layout(runner):
    code = "n = int(input())\nfor i in range(n):\n    print(i, end='  ')\nprint()\nprint()"
    cases = [IoCase(stdin="3\n", expected="0 1 2\n")]
    assert runner.run_sync(ExecRequest(code=code, harness="io", cases=cases)).verdict == "failed"
    assert runner.run_sync(ExecRequest(code=code, harness="io", cases=cases, compare="whitespace")).verdict == "passed"


def test_each_case_has_its_own_time_limit(runner):
    code = "n = int(input())\nwhile n == 0:\n    pass\nprint(n)"
    cases = [IoCase(stdin="1", expected="1\n"), IoCase(stdin="0", expected="0\n", timeout_s=0.3),
             IoCase(stdin="2", expected="2\n")]
    started = time.monotonic()
    result = runner.run_sync(ExecRequest(code=code, harness="io", cases=cases, limits=Limits(timeout_s=5)))
    assert time.monotonic() - started < 3  # the case's 0.3 s, not the item's 5 s
    assert [c.verdict for c in result.cases] == ["passed", "timeout", "passed"]
    assert (result.verdict, result.failed_case, result.limit) == ("timeout", 1, "timeout")


def test_limits_other_than_time_are_limit(runner):
    flood = runner.run_sync(ExecRequest(code="while True: print('x' * 1000)", harness="io",
                                        cases=[IoCase(expected="")], limits=Limits(output_bytes=10_000)))
    assert (flood.verdict, flood.cases[0].limit) == ("limit", "output")


def test_javascript_reads_each_cases_stdin(runner):
    code = "const line = std.in.getline(); console.log(line.split(' ').map(Number).reduce((a, b) => a + b))"
    cases = [IoCase(stdin="1 2", expected="3"), IoCase(stdin="1 2 3", expected="6"), IoCase(stdin="5", expected="4")]
    result = runner.run_sync(ExecRequest(code=code, language="javascript", harness="io", cases=cases,
                                         compare="whitespace"))
    assert [c.verdict for c in result.cases] == ["passed", "passed", "failed"]
    assert (result.verdict, result.failed_case, result.stdout) == ("failed", 2, "5\n")
