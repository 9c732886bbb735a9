"""A library that takes over the trap signals after wasmtime (faulthandler, as Ray's core worker
enables it) would turn a guest's stack overflow into the death of the process: `keep_trap_handlers`
puts wasmtime's handlers back."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.runtimes  # the scripts run guests

SCRIPT = """
import faulthandler, sys
from wasm_runner import Runner
from wasm_runner.lowlevel.trap_handlers import keep_trap_handlers
overflow = "function f(n) {{ return f(n + 1) + 1; }} f(0);"
with Runner(isolation="in-process") as runner:  # the handlers of this very process
    print(runner.run_sync(overflow, language="javascript").limit, flush=True)  # wasmtime's handlers are in
    if {kept}:
        with keep_trap_handlers():
            faulthandler.enable()
    else:
        faulthandler.enable()
    print(runner.run_sync(overflow, language="javascript").limit, flush=True)
"""


@pytest.mark.parametrize("kept", [True, False])
def test_a_guest_overflow_stays_a_result_once_the_handlers_are_kept(kept):
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(kept=kept)], capture_output=True, text=True, timeout=120)
    if kept:
        assert done.returncode == 0 and done.stdout.split() == ["stack", "stack"], done.stderr[-2000:]
    else:  # what the keeper prevents
        assert done.returncode != 0 and done.stdout.split() == ["stack"], (done.returncode, done.stdout)
        assert "Fatal Python error" in done.stderr
