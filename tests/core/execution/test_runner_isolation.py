"""A plain `Runner()` is safe to embed: its guests run on worker processes it supervises, so a
guest stuck in a host call costs a killable process, never a thread of the program, and the
program exits. `isolation="in-process"` is the explicit opt-in for trusted code, with the
trade-off this file shows."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from stuck_guest import REAL_SLEEP

from wasm_runner import Limits, Runner

HELPERS = Path(__file__).parents[2] / "helpers"

# The embedding program: six guests stuck in the host's real sleep at once, then (with "close")
# `Runner.close()` or (without) simply the end of the script.
PROGRAM = textwrap.dedent("""
    import asyncio, json, os, sys, threading
    from pathlib import Path

    from wasm_runner import Limits, Runner

    code, isolation, ending = sys.argv[1], sys.argv[2], sys.argv[3]

    def children():
        return sorted(int(pid) for task in Path(f"/proc/{os.getpid()}/task").iterdir()
                      for pid in (task / "children").read_text().split())

    def blocking_threads():
        return sorted(t.name for t in threading.enumerate()
                      if t.is_alive() and not t.daemon and t is not threading.main_thread())

    threads_before = threading.active_count()
    # In-process, with a thread for each guest: one queued behind a stuck thread would wait for it.
    runner = Runner(isolation=isolation, **({"concurrency": 6} if isolation == "in-process" else {}))
    idle_children = children()

    async def six_stuck_guests():
        return await asyncio.gather(*(runner.run(code, limits=Limits(timeout_s=1)) for _ in range(6)))

    results = asyncio.run(six_stuck_guests())
    after = runner.run_sync("print('after')")  # the runner serves on (a worker is live again for `children`)
    seen = {"results": [{"limit": r.limit, "stdout": r.stdout, "error": r.error and r.error.type} for r in results],
            "after": after.stdout,
            "threads_before": threads_before, "threads_after": threading.active_count(),
            "one_shot_workers": runner.one_shot_workers.count if runner.one_shot_workers else 0,
            "idle_children": idle_children, "children": children(), "isolation": runner.isolation}
    if ending == "close":
        runner.close()
    seen["blocking_threads"] = blocking_threads()
    print(json.dumps(seen), flush=True)
    if isolation == "in-process":
        os._exit(0)  # what it takes: its stuck threads would keep the interpreter from exiting
""")

EXIT_BOUND_S = 60
"""How long the program may take, six stuck guests included (about 15 s here), before it counts as hung."""


def run_program(isolation: str, ending: str) -> tuple[dict, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")])}
    began = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", PROGRAM, REAL_SLEEP, isolation, ending],
                              capture_output=True, text=True, timeout=EXIT_BOUND_S, env=env)
    except subprocess.TimeoutExpired as exc:  # killed by the bound: the program hung
        pytest.fail(f"the embedding program did not exit within {EXIT_BOUND_S} s; it printed {exc.stdout!r}")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), time.monotonic() - began


def gone(pids: list[int], within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while any(Path(f"/proc/{pid}").exists() for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("ending", ["close", "end of script"])
def test_a_plain_runner_survives_six_guests_stuck_in_a_host_call_and_its_program_exits(ending):
    seen, _ = run_program("process", ending)
    assert seen["isolation"] == "process"
    assert seen["results"] == [{"limit": "timeout", "stdout": "before the sleep\n", "error": "LimitExceeded"}] * 6, seen
    assert seen["idle_children"] == []  # a Runner that has run nothing started nothing
    # One reader thread per live worker process; the stuck guests held threads of their workers only.
    assert seen["threads_after"] <= seen["threads_before"] + seen["one_shot_workers"] + 2, seen
    # A worker whose guest met its deadline exits (its engine has no epoch checks: decision 0012) and the
    # Runner starts another: the run after the six was served by a live worker.
    assert seen["after"] == "after\n" and 0 < len(seen["children"]) <= seen["one_shot_workers"], seen
    assert seen["blocking_threads"] == [], seen
    assert gone(seen["children"]), "worker processes outlived the program"


def test_the_in_process_opt_in_runs_guests_on_the_programs_own_threads_which_stay_stuck():
    seen, _ = run_program("in-process", "close")
    assert seen["isolation"] == "in-process"
    assert [r["limit"] for r in seen["results"]] == ["timeout"] * 6, seen  # answered for, all the same
    assert seen["children"] == []  # no worker process: the guests ran here
    assert len(seen["blocking_threads"]) == 6, seen  # each stuck guest holds a thread no one can stop


def test_the_worker_counts_and_providers_of_ones_own_are_checked_against_the_isolation(tmp_path):
    with pytest.raises(ValueError, match="isolation='in-process'"):
        Runner(tmp_path / "a", kernel_workers=0)
    with pytest.raises(ValueError, match="isolation='in-process'"):
        Runner(tmp_path / "b", providers=[])
    with pytest.raises(ValueError, match="'process' or 'in-process'"):
        Runner(tmp_path / "c", isolation="thread")  # type: ignore[arg-type]
    with Runner(tmp_path / "d", isolation="in-process", providers=[]) as trusted:
        assert trusted.kernel_workers is None and trusted.one_shot_workers is None


def test_where_no_worker_can_start_runs_are_refused_not_run_in_this_process(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.executable", "/bin/false")
    with Runner(tmp_path, limits=Limits(timeout_s=5)) as runner:
        first = runner.run_sync("print(1)")
        assert first.error is not None and first.error.type == "HostError" and first.stdout == "", first
        again = runner.run_sync("print(2)")
        assert again.error.type == "HostError" and "isolation='in-process'" in again.error.message, again
        refused = runner.session().run_sync("print(3)")
        assert refused.error.type == "HostError" and refused.stdout == "", refused
        assert runner.abandoned_workers == 0 and runner.executor.abandoned_workers == 0
