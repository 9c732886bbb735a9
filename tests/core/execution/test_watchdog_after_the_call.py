"""A watchdog that gives up a call only after the guest returned (the host's work after a limit, slow on a
loaded machine: a rollback, the workspace's scan) reads no guest memory: the kernel that held the call's
output may be closed and its memory unmapped by then. It read it, and the process died (SIGSEGV)."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.runtimes

SCRIPT = """
import tempfile, time
from wasm_runner import Limits, Runner
from wasm_runner.workspace import layout

scans, scan = [0], layout.Workspace.scan
def slow_scan(self, *args, **kwargs):  # the scan after the timed-out call: its kernel is closed by then
    scans[0] += 1
    if scans[0] == 2:
        time.sleep(3)  # past the watchdog's grace (2 s after the deadline)
    return scan(self, *args, **kwargs)
layout.Workspace.scan = slow_scan

with Runner(tempfile.mkdtemp(), isolation="in-process") as runner:
    session = runner.session()
    assert session.run_sync("x = 1", language="python").exit_code == 0
    scans[0] = 0
    result = session.run_sync("print('hi')\\nwhile True: pass", language="python", limits=Limits(timeout_s=0.5))
    print(result.limit, runner.abandoned_workers, flush=True)
"""


def test_a_call_given_up_after_its_kernel_closed_reads_none_of_its_memory():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["timeout", "1"]  # the watchdog did give it up, after the kernel closed
