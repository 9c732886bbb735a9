"""What a native guest's stderr says went wrong, read without running one."""

from __future__ import annotations

from wasm_runner.providers.native.guest_errors import js_error, python_traceback


def test_a_python_traceback_gives_the_error_type_message_and_traceback() -> None:
    stderr = ("warming up\nTraceback (most recent call last):\n  File \"/workspace/main.py\", line 2, in <module>\n"
              "    import pandas.nothing\nModuleNotFoundError: No module named 'pandas.nothing'\n")
    error = python_traceback(stderr)
    assert error is not None and error.type == "ModuleNotFoundError"
    assert error.message == "No module named 'pandas.nothing'" and error.traceback.startswith("Traceback")


def test_stderr_without_a_traceback_is_no_error() -> None:
    assert python_traceback("a warning, and a clean exit\n") is None


def test_a_node_error_names_its_line_and_source() -> None:
    code = "const a = 1;\nnull.x;\n"
    stderr = ("/tmp/run/main.js:2\nnull.x;\n     ^\n\nTypeError: Cannot read properties of null (reading 'x')\n"
              "    at Object.<anonymous> (/tmp/run/main.js:2:6)\n")
    error = js_error(stderr, code)
    assert error is not None and (error.type, error.line, error.source) == ("TypeError", 2, "null.x;")
    assert error.message == "Cannot read properties of null (reading 'x')"


def test_a_bun_error_line_is_an_error() -> None:
    error = js_error("error: Cannot find module 'left-pad'\n", "")
    assert error is not None and (error.type, error.message) == ("Error", "Cannot find module 'left-pad'")
