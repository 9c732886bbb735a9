"""The parent's reader of a worker's pipe: a worker it cannot follow is ended, never waited on."""

import subprocess
import sys

from wasm_runner.execution import workers
from wasm_runner.execution.workers import Worker


def test_a_worker_whose_first_frame_is_not_ready_is_ended(tmp_path, monkeypatch):
    # Stands for a worker that answers before it said it was ready: its calls would otherwise wait forever.
    script = ("import struct, sys, time\n"
              "sys.stdout.buffer.write(struct.pack('<I', 6) + b'answer'); sys.stdout.flush()\n"
              "time.sleep(60)\n")
    popen = subprocess.Popen
    monkeypatch.setattr(workers.subprocess, "Popen", lambda argv, **kw: popen([sys.executable, "-c", script], **kw))
    worker = Worker(tmp_path, ())
    exits = []
    worker.watch(None, exits.append)
    assert worker.exited.wait(10), "the parent kept waiting on a worker it could not follow"
    assert worker.proc.returncode == -9 and not worker.ready.is_set() and exits == [worker]


def test_a_worker_whose_answer_cannot_be_decoded_is_ended(tmp_path, monkeypatch):
    script = ("import struct, sys, time\n"
              "for body in (b'ready', b'\\xc1 not msgpack'):\n"
              "    sys.stdout.buffer.write(struct.pack('<I', len(body)) + body); sys.stdout.flush()\n"
              "time.sleep(60)\n")
    popen = subprocess.Popen
    monkeypatch.setattr(workers.subprocess, "Popen", lambda argv, **kw: popen([sys.executable, "-c", script], **kw))
    worker = Worker(tmp_path, ())
    assert worker.exited.wait(10)
    assert worker.proc.returncode == -9 and worker.ready.is_set()
