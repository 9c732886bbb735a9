"""Batch items of every kind a harness judges, each with the verdict it must get."""

from __future__ import annotations

from wasm_runner import ExecRequest, Limits
from wasm_runner_protocol.execution import IoCase

ADD_OK = "def add(a, b):\n    return a + b"
ADD_BAD = "def add(a, b):\n    return a - b"
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0"
SUM_LINE = "a, b = map(int, input().split())\nprint(a + b)"

MIXED = {
    "pass": (ExecRequest(code=ADD_OK, harness="check", tests=TESTS), "passed"),
    "fail": (ExecRequest(code=ADD_BAD, harness="check", tests=TESTS), "failed"),
    "error": (ExecRequest(code="def add(a, b):\n    return a + b\nimport nonexistent_mod", harness="check", tests=TESTS),
              "error"),
    "timeout": (ExecRequest(code="while True: pass", harness="check", tests=TESTS, limits=Limits(timeout_s=0.3)), "timeout"),
    "crash": (ExecRequest(code="import os\nos._exit(3)", harness="check", tests=TESTS), "error"),
    "memory": (ExecRequest(code="x = [bytearray(64 << 20) for _ in range(64)]", harness="check", tests=TESTS), "limit"),
    "flood": (ExecRequest(code="while True: print('x' * 1000)", harness="check", tests=TESTS,
                          limits=Limits(output_bytes=10_000)), "limit"),
    # A trap through wasmtime's signal handlers: QuickJS runs out of wasm stack.
    "overflow": (ExecRequest(code="function add(a, b) { return add(a, b) + 1 }\nadd(1, 2)", language="javascript",
                             harness="check", tests="assert.strictEqual(add(1, 2), 3)"), "limit"),
    "io-pass": (ExecRequest(code=SUM_LINE, harness="io", cases=[IoCase(stdin="1 2", expected="3\n"),
                                                                IoCase(stdin="40 2", expected="42\n")]), "passed"),
    "io-fail": (ExecRequest(code=SUM_LINE, harness="io", cases=[IoCase(stdin="1 2", expected="3\n"),
                                                                IoCase(stdin="2 2", expected="5\n")]), "failed"),
}
"""Kind -> (a request of that kind, its verdict)."""


def mixed_items(weights: dict[str, int]):
    """`weights[kind]` items of each kind, interleaved, ids `N:kind`."""
    kinds = [kind for kind, count in weights.items() for _ in range(count)]
    order = sorted(range(len(kinds)), key=lambda i: (i * 7919) % len(kinds))  # spread the kinds through the batch
    for number, index in enumerate(order):
        kind = kinds[index]
        yield ExecRequest(**{**_fields(MIXED[kind][0]), "id": f"{number}:{kind}"})


def expected_verdict(result_id: str) -> str:
    return MIXED[result_id.split(":", 1)[1]][1]


def _fields(request: ExecRequest) -> dict:
    return {name: getattr(request, name) for name in request.__struct_fields__}
