"""The kernels' side of a worker process: a worker retiring after stuck guests exits only once
every call it ran is answered."""

import json
import subprocess
import sys
import textwrap

from stuck_guest import REAL_SLEEP

# Run in a process of its own, like a worker's: its stuck guests' threads sleep on, and only the
# process's end (`os._exit`, as a retiring worker's) takes them; in the test's process they would
# keep it from ever exiting.
SCENARIO = textwrap.dedent("""
    import json, os, sys, threading, time
    from pathlib import Path

    from wasm_runner import Limits, Runner, Session
    from wasm_runner.execution.kernel_host import KernelHost
    from wasm_runner.execution.pipe import Answer, Order, Place
    from wasm_runner_protocol.execution import ExecRequest

    root, code = Path(sys.argv[1]), sys.argv[2]
    sent = []
    answered_at_exit = []
    exited = threading.Event()
    slow_once = threading.Lock()

    def send(answer):
        if answer.result is not None and slow_once.acquire(blocking=False):
            time.sleep(1)  # the first answer is slow to write: the other call ends meanwhile
        sent.append(answer)

    def exit_process():
        answered_at_exit.append(sorted(a.seq for a in sent if a.result is not None))
        exited.set()

    runner = Runner(root / "data", isolation="in-process", concurrency=2)
    runner.prepare()
    host = KernelHost(runner, lambda sid, workspace, mounts, owner: Session(runner, sid, workspace, mounts, owner),
                      send, exit_process)
    for seq, session in ((1, "a"), (2, "b")):
        (root / session).mkdir()
        request = ExecRequest(code=code, limits=Limits(timeout_s=1))
        host.order(Order(seq, request, Place(session, str(root / session))))
    exited.wait(30)
    time.sleep(1.5)  # an answer the exit would have cut off is written by now
    results = {a.seq: {"limit": a.result.limit, "stdout": a.result.stdout} for a in sent if a.result is not None}
    print(json.dumps({"answered_at_exit": answered_at_exit, "results": results,
                      "retiring": any(a.retiring for a in sent)}), flush=True)
    os._exit(0)
""")


def test_a_retiring_worker_exits_only_after_every_stuck_call_is_answered(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCENARIO, str(tmp_path), REAL_SLEEP],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["answered_at_exit"] == [[1, 2]], seen
    assert all(r == {"limit": "timeout", "stdout": "before the sleep\n"} for r in seen["results"].values()), seen
    assert seen["retiring"], seen
