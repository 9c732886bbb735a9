"""`wasm-runner run` prints the hint of a failed run's error, after the program's own traceback."""

import subprocess
import sys

import pytest

from wasm_runner.hints import data_module_hint


@pytest.fixture(scope="module", autouse=True)
def prepared(runner):
    """The session runner fixture has built and compiled the runtimes already."""


def test_an_import_of_pandas_in_webassembly_says_on_stderr_which_profile_has_it():
    done = subprocess.run([sys.executable, "-m", "wasm_runner.cli", "run", "-c", "import pandas"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'pandas'" in done.stderr
    assert done.stderr.endswith(f"[wasm-runner] hint: {data_module_hint('pandas')}\n")


def test_an_ordinary_error_prints_no_hint():
    done = subprocess.run([sys.executable, "-m", "wasm_runner.cli", "run", "-c", "1/0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "ZeroDivisionError" in done.stderr and "hint" not in done.stderr
