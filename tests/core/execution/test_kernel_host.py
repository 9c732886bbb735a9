"""The kernels' side of a worker process: a worker retiring after stuck guests exits only once
every call it ran is answered."""

import threading
import time

from stuck_guest import REAL_SLEEP

from wasm_runner import Limits, Runner
from wasm_runner.execution.kernel_host import KernelHost
from wasm_runner.execution.pipe import Answer, Order, Place
from wasm_runner_protocol.execution import ExecRequest


def test_a_retiring_worker_exits_only_after_every_stuck_call_is_answered(tmp_path):
    sent: list[Answer] = []
    answered_at_exit: list[set[int]] = []
    exited = threading.Event()
    slow_once = threading.Lock()

    def send(answer: Answer) -> None:
        if answer.result is not None and slow_once.acquire(blocking=False):
            time.sleep(1)  # the first answer is slow to write: the other call ends meanwhile
        sent.append(answer)

    def exit_process() -> None:
        answered_at_exit.append({a.seq for a in sent if a.result is not None})
        exited.set()

    with Runner(tmp_path / "data", concurrency=2) as runner:
        runner.prepare()
        host = KernelHost(runner, send, exit_process)
        for seq, session in ((1, "a"), (2, "b")):
            (tmp_path / session).mkdir()
            request = ExecRequest(code=REAL_SLEEP, limits=Limits(timeout_s=1))
            host.order(Order(seq, request, Place(session, str(tmp_path / session))))
        assert exited.wait(30)
        time.sleep(1.5)  # an answer the exit would have cut off is written by now
        results = {a.seq: a.result for a in sent if a.result is not None}
    assert answered_at_exit[0] == {1, 2}, (answered_at_exit, results)
    assert all(r.limit == "timeout" and r.stdout == "before the sleep\n" for r in results.values()), results
    assert any(a.retiring for a in sent)
