"""The native tier's POSIX helpers on a real process tree (no sandbox needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from wasm_runner.providers.native.posix import child_tree, children_of, descendants, reap, signal_pid, wait_exit_code


def _wait_for(condition, bound_s: float = 10.0) -> bool:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_the_tree_of_a_process_is_seen_both_ways() -> None:
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        assert _wait_for(lambda: len(children_of(parent.pid)) == 2)
        sleepers = set(children_of(parent.pid))
        assert child_tree(parent.pid) == sleepers == descendants(parent.pid)
        for pid in sleepers:
            signal_pid(pid, signal.SIGKILL)
        assert _wait_for(lambda: not descendants(parent.pid))
    finally:
        parent.kill()
        parent.wait()


def test_a_killed_child_is_reaped_with_its_signal_and_then_is_gone() -> None:
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    assert reap(child) == (None, None)  # still running
    signal_pid(child, signal.SIGKILL)
    statuses: list[int | None] = []

    def reaped() -> bool:
        statuses.append(reap(child)[0])
        return statuses[-1] is not None

    assert _wait_for(reaped)
    assert wait_exit_code(statuses[-1] or 0) == 128 + signal.SIGKILL
    assert reap(child)[0] == 0  # reaped already: nothing to wait for
    signal_pid(child, signal.SIGKILL)  # gone: no error


def test_a_wait_status_becomes_a_shell_exit_code() -> None:
    child = os.fork()
    if child == 0:
        os._exit(3)
    _, status = os.waitpid(child, 0)
    assert wait_exit_code(status) == 3
