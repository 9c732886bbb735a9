"""The per-process checking approach of HumanEval's reference harness, written anew here.

What human-eval's `execution.py` does for each check, reproduced (not copied):
- a `multiprocessing.Manager()` holds the result list, and one forked `multiprocessing.Process`
  runs the check; the parent joins it for `timeout + 1` s and kills it if still alive;
- in the child: a fresh temporary working directory, then a reliability guard that disables
  destructive functions (os.kill/system/remove/fork..., shutil.rmtree/move, subprocess.Popen,
  exit/quit/help, faulthandler), then `exec(program + tests)` with stdout/stderr/stdin
  swallowed and a SIGALRM interval-timer time limit;
- checks are submitted to a thread pool of `workers` threads, as the reference's
  `evaluate_functional_correctness` does.
It runs native CPython: the guard is a speed bump against accidents, not an isolation
boundary (the reference says as much).
"""

from __future__ import annotations

import builtins
import contextlib
import faulthandler
import io
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from _common import Adapter, NotAvailable, main


class CheckTimedOut(Exception):
    pass


@contextlib.contextmanager
def alarm_after(seconds: float):
    """Raise CheckTimedOut in this (main) thread once `seconds` have passed."""

    def expired(signum, frame):
        raise CheckTimedOut("timed out")

    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


class _Sink(io.StringIO):
    """Takes writes and drops them; refuses reads (so a check cannot wait on stdin)."""

    def read(self, *args, **kwargs):
        raise OSError("stdin is closed in a check")

    readline = readlines = read

    def readable(self) -> bool:
        return False


@contextlib.contextmanager
def io_swallowed():
    sink = _Sink()
    old_stdin = sys.stdin
    sys.stdin = sink
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        sys.stdin = old_stdin


@contextlib.contextmanager
def in_scratch_dir():
    with tempfile.TemporaryDirectory() as path:
        previous = os.getcwd()
        os.chdir(path)
        try:
            yield path
        finally:
            os.chdir(previous)


DISABLED_OS = ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
               "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod",
               "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")


def guard_process() -> None:
    """Switch off what could damage the machine by accident (not a security boundary)."""
    faulthandler.disable()
    builtins.exit = None
    builtins.quit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in DISABLED_OS:
        if hasattr(os, name):
            setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    for module in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[module] = None


def _child(source: str, timeout_s: float, results) -> None:
    with in_scratch_dir():
        restore = (shutil.rmtree, os.rmdir, os.chdir)  # the scratch dir's clean-up needs them
        guard_process()
        try:
            with io_swallowed(), alarm_after(timeout_s):
                exec(source, {})
            results.append("passed")
        except CheckTimedOut:
            results.append("timed out")
        except BaseException as exc:  # noqa: BLE001 - anything else fails the check
            results.append(f"failed: {type(exc).__name__}: {exc}")
        shutil.rmtree, os.rmdir, os.chdir = restore


def check_in_process(source: str, timeout_s: float) -> str:
    """One check: a Manager for the result, a forked Process for the work."""
    manager = multiprocessing.Manager()
    try:
        results = manager.list()
        proc = multiprocessing.Process(target=_child, args=(source, timeout_s, results))
        proc.start()
        proc.join(timeout=timeout_s + 1)
        if proc.is_alive():
            proc.kill()
            proc.join()
        outcome = list(results)
    finally:
        manager.shutdown()
    return outcome[0] if outcome else "timed out"


class HumanEvalNative(Adapter):
    name = "humaneval-native"

    def versions(self) -> dict[str, str]:
        return {"python": sys.version.split()[0], "start_method": multiprocessing.get_start_method(),
                "approach": "human-eval execution.py per-check method, reimplemented"}

    def fresh(self, code: str) -> None:
        outcome = check_in_process(code, 10.0)
        if outcome != "passed":
            raise RuntimeError(outcome)
        return None  # stdout is swallowed by the approach: not observable

    def session(self):
        raise NotAvailable("every check is a new forked process; nothing persists")

    def cpu(self, code: str, timeout_s: float) -> tuple[float | None, float]:
        started = time.perf_counter()
        outcome = check_in_process(code, timeout_s)
        wall = (time.perf_counter() - started) * 1000
        if outcome != "passed":
            raise RuntimeError(outcome)
        return None, wall  # in-guest time is printed to a swallowed stdout

    def check(self, task: dict, timeout_s: float) -> tuple[str, str]:
        outcome = check_in_process(task["program"] + "\n" + task["tests"], timeout_s)
        if outcome == "passed":
            return "passed", ""
        if outcome == "timed out":
            return "timeout", ""
        return "failed", outcome[:200]


if __name__ == "__main__":
    main(HumanEvalNative)
