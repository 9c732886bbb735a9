"""The check harness for JavaScript and TypeScript: tests are code calling the program's functions."""

import pytest

from wasm_runner import ExecRequest, Limits

NODE_STYLE = """const assert = require('node:assert');
function test() {
  let candidate = merge;
  assert.deepEqual(candidate([1], [2]), [1, 2]);
  assert.deepEqual(candidate([], [3]), [3]);
}
test();"""

PROGRAMS = {
    "javascript": "function merge(a, b) { return a.concat(b); }",
    "typescript": "function merge(a: number[], b: number[]): number[] { return a.concat(b); }",
}
WRONG = {
    "javascript": "const merge = (a, b) => b.concat(a);",
    "typescript": "const merge = (a: number[], b: number[]): number[] => b.concat(a);",
}


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_verdicts(runner, language):
    def check(code, tests, **fields):
        return runner.run_sync(ExecRequest(code=code, tests=tests, language=language, harness="check", **fields))

    assert check(PROGRAMS[language], NODE_STYLE).verdict == "passed"
    failed = check(WRONG[language], NODE_STYLE)
    assert failed.verdict == "failed"
    assert (failed.error.type, failed.error.line) == ("AssertionError", 4)  # the test's line, not the harness's
    assert failed.error.source.strip().startswith("assert.deepEqual(candidate([1], [2])")
    assert check(PROGRAMS[language], "assert.strictEqual(merge([1], [1]).length, 2)").verdict == "passed"
    assert check(PROGRAMS[language], "if (merge([], []).length !== 1) throw new Error('empty')").verdict == "failed"
    assert check("throw new Error('broken at load')", NODE_STYLE).verdict == "error"
    assert check(PROGRAMS[language], "while (true) {}", limits=Limits(timeout_s=0.3)).verdict == "timeout"
    hog = check(PROGRAMS[language], "const a = []; while (true) a.push(new Array(1e6).fill(1));",
                limits=Limits(memory_bytes=64 * 1024 * 1024))
    assert (hog.verdict, hog.limit) == ("limit", "memory")
