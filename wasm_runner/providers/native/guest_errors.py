"""What a native guest's stderr says went wrong: a Python traceback, Node's or bun's uncaught
error, or signs of running out of memory."""

from __future__ import annotations

import re

from wasm_runner_protocol.execution import GuestError

MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory",
                "JavaScript heap out of memory", "cannot allocate")


def python_traceback(stderr: str) -> GuestError | None:
    marker = stderr.rfind("Traceback (most recent call last):")
    if marker < 0:
        return None
    tb = stderr[marker:].rstrip()
    last = tb.splitlines()[-1]
    type_, sep, message = last.partition(": ")
    if not sep and not re.fullmatch(r"[\w.]+", last):
        return None
    return GuestError(type=type_.split(".")[-1], message=message, traceback=tb[-8000:])


JS_ERROR_LINE = re.compile(r"^(?:Uncaught )?(?P<type>[A-Z]\w*)(?: \[\w+\])?: (?P<message>.*)$|^error: (?P<bun>.*)$")
JS_PLACE = re.compile(r"/main\.[jt]s:(\d+)")


def js_error(stderr: str, code: str) -> GuestError | None:
    """Node's or bun's report of an uncaught error, with its line in the program, as a GuestError."""
    for line in stderr.splitlines():
        match = JS_ERROR_LINE.match(line)
        if match:
            break
    else:
        return None
    type_, message = (match["type"], match["message"]) if match["type"] else ("Error", match["bun"])
    error = GuestError(type=type_, message=message, traceback=stderr.strip()[-8000:])
    place = JS_PLACE.search(stderr)
    if place is not None:
        error.line = int(place.group(1))
        lines = code.splitlines()
        if 0 < error.line <= len(lines):
            error.source = lines[error.line - 1].strip()
    return error
