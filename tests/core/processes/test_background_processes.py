"""A session's background processes: confined natively, read by offset, signalled, capped, ended with it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from host_processes import host_processes_with

from wasm_runner import Runner
from wasm_runner.processes import ProcessError, ProcessLimitError, ProcessLimits
from wasm_runner.providers.native.bwrap import find_bwrap, probe

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")


def until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory):
    with Runner(tmp_path_factory.mktemp("processes"), isolation="in-process") as runner:
        yield runner


def test_output_is_kept_per_stream_and_read_by_offset_after_the_process_ended(runner: Runner) -> None:
    session = runner.session("offsets")
    process = session.start_process(["bash", "-c", "for i in 1 2 3; do echo line$i; done; echo oops >&2; exit 3"])
    assert process.wait(10) == 3
    first = process.output("stdout", 0, 6)
    rest = process.output("stdout", first.next_offset)
    assert first.data + rest.data == b"line1\nline2\nline3\n"
    assert process.text("stderr") == "oops\n"
    info = process.info()
    assert info.state == "exited" and info.exit_code == 3 and info.stdout_bytes == 18 and info.pid is None


def test_the_ring_drops_the_oldest_output_and_says_how_much(runner: Runner) -> None:
    session = runner.session("ring")
    process = session.start_process(["python3", "-c", "import sys; sys.stdout.write('a' * 10000 + 'END')"],
                                    ring_bytes=4096)
    assert process.wait(10) == 0
    chunk = process.output("stdout", 0)
    assert chunk.dropped == 10003 - 4096 and chunk.data.endswith(b"END") and len(chunk.data) == 4096
    assert process.info().stdout_dropped == 10003 - 4096


def test_input_written_to_a_process_that_reads_stdin(runner: Runner) -> None:
    session = runner.session("stdin")
    process = session.start_process(code="import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\n",
                                    language="python")
    process.write("alpha\n")
    assert until(lambda: b"got alpha" in process.output().data)
    process.write("beta\n", eof=True)
    assert process.wait(10) == 0
    assert process.text() == "got alpha\ngot beta\n"


def test_code_runs_in_the_workspace_with_a_cwd_under_it_and_an_allowlisted_env(runner: Runner) -> None:
    session = runner.session("cwd")
    (session.path / "sub").mkdir(parents=True, exist_ok=True)
    os.environ["I25_HOST_SECRET"] = "leak"
    try:
        process = session.start_process(code='pwd; echo "[$I25_HOST_SECRET][$MINE]"; id -u', language="bash",
                                        cwd="sub", env={"MINE": "yes"})
    finally:
        del os.environ["I25_HOST_SECRET"]
    assert process.wait(10) == 0
    assert process.text().splitlines() == ["/workspace/sub", "[][yes]", "1000"]
    with pytest.raises(ProcessError, match="under /workspace"):
        session.start_process(["true"], cwd="../etc")


def test_term_then_kill_of_a_process_tree_leaves_nothing_on_the_host(runner: Runner) -> None:
    session = runner.session("tree")
    marker = "4321.125"
    script = f"trap '' TERM; (trap '' TERM; sleep {marker}) & sleep {marker} & wait"
    process = session.start_process(["bash", "-c", script])
    assert until(lambda: len(host_processes_with("sleep\0" + marker)) >= 2)
    assert process.signal("TERM") is True  # the main process ignores it
    time.sleep(0.1)
    assert process.info().state == "running"
    started = time.monotonic()
    code = process.kill(grace_s=0.3)  # TERM to every process of the sandbox, then KILL
    assert time.monotonic() - started < 5
    assert code is not None and process.info().state == "killed"
    assert until(lambda: host_processes_with(marker) == [], 5)


def test_a_process_stopped_while_its_sandbox_starts_does_not_wait_out_the_grace(runner: Runner) -> None:
    # Twenty tries: until bwrap names its init, the sandbox holds bwrap's init-to-be, which ignores TERM
    # (the stop waited the whole grace in 2 of 60 tries when it was sent TERM).
    for _ in range(20):
        process = runner.session("early").start_process(["sleep", "60"])
        started = time.monotonic()
        process.kill(grace_s=30)  # TERM would reach nobody yet: KILL at once
        assert time.monotonic() - started < 10 and process.info().state == "killed"


def test_a_tree_signal_sent_as_soon_as_the_process_runs_reaches_it(runner: Runner) -> None:
    """A client that kills a process the moment it is reported running (E2B's `kill` after `start`):
    the sandbox's program may not be forked yet, and the signal must wait for it, not report it gone."""
    for attempt in range(5):
        process = runner.session(f"tree-early-{attempt}").start_process(["sleep", "60"])
        assert until(lambda process=process: process.info().state != "starting", 30)
        assert process.signal("KILL", tree=True) is True
        assert process.wait(10) is not None and process.info().state == "killed"


def test_int_reaches_the_program(runner: Runner) -> None:
    session = runner.session("int")
    process = session.start_process(["python3", "-u", "-c",
                                     "import time\nprint('ready')\ntry:\n    while True:\n        time.sleep(0.1)\n"
                                     "except KeyboardInterrupt:\n    print('interrupted')\n"])
    assert until(lambda: b"ready" in process.output().data)
    assert process.signal("INT")
    assert process.wait(10) == 0
    assert "interrupted" in process.text()


def test_a_service_that_ignores_int_quit_and_hup_does_not_pass_that_on(runner: Runner) -> None:
    # A service started in the background (`&`, nohup) ignores them; ignored signals survive exec.
    numbers = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
    before = [signal.signal(number, signal.SIG_IGN) for number in numbers]
    try:
        process = runner.session("ignoring").start_process(["grep", "SigIgn", "/proc/self/status"])
    finally:
        for number, handler in zip(numbers, before, strict=True):
            signal.signal(number, handler)
    assert process.wait(10) == 0, process.text()
    ignored = int(process.text().split()[-1], 16)
    assert ignored & sum(1 << (number - 1) for number in numbers) == 0, hex(ignored)


def test_the_cap_on_live_processes_refuses_the_next_start_with_a_clear_error(runner: Runner) -> None:
    session = runner.session("cap")
    session.process_limits = ProcessLimits(max_live=2)
    first = session.start_process(["sleep", "60"])
    session.start_process(["sleep", "60"])
    with pytest.raises(ProcessLimitError, match="2 live processes, its cap"):
        session.start_process(["sleep", "60"])
    first.kill(grace_s=0)
    session.start_process(["true"]).wait(10)  # room again
    session.stop_processes()


def test_the_cap_on_total_memory_refuses_a_start_past_it(runner: Runner) -> None:
    session = runner.session("memory")
    session.process_limits = ProcessLimits(memory_bytes=300 * 1024 * 1024)
    session.start_process(["sleep", "60"], limits={"memory_bytes": 200 * 1024 * 1024})
    with pytest.raises(ProcessLimitError, match="300 MiB together"):
        session.start_process(["sleep", "60"], limits={"memory_bytes": 200 * 1024 * 1024})
    session.stop_processes()


def test_a_process_over_its_memory_limit_is_stopped_and_says_so(runner: Runner) -> None:
    session = runner.session("oom")
    process = session.start_process(["python3", "-c", "b = bytearray(400 * 1024 * 1024); print(len(b))"],
                                    limits={"memory_bytes": 64 * 1024 * 1024})
    assert process.wait(20) != 0
    info = process.info()
    if info.enforcement.startswith("cgroup"):
        assert "memory" in (info.error or "")
    else:
        assert "MemoryError" in process.text("stderr")


def test_a_terminal_runs_an_interactive_shell(runner: Runner) -> None:
    session = runner.session("pty")
    process = session.start_process(["bash", "--norc", "-i"], pty=(80, 24))
    process.write("echo $((6*7))\n")
    assert until(lambda: b"42" in process.output().data)
    process.resize(120, 40)
    process.write("stty size\n")
    assert until(lambda: b"40 120" in process.output().data)
    process.write("exit\n")
    assert process.wait(10) == 0


def test_hibernate_and_destroy_end_every_process_and_leave_none_behind(runner: Runner) -> None:
    session = runner.session("ends")
    marker = "4321.25"
    kept = session.start_process(["sleep", marker])
    daemon = session.start_process(["bash", "-c", f"setsid sleep {marker} & disown; sleep {marker}"])
    assert until(lambda: len(host_processes_with("sleep\0" + marker)) >= 3)
    session.hibernate()
    assert kept.info().state == "killed" and "hibernated" in (kept.info().error or "")
    assert daemon.info().state == "killed"
    assert until(lambda: host_processes_with(marker) == [], 5)
    session.start_process(["sleep", marker])
    assert until(lambda: len(host_processes_with(marker)) >= 1)
    session.destroy()
    assert until(lambda: host_processes_with(marker) == [], 5)


def test_closing_the_runner_ends_its_sessions_processes(tmp_path: Path) -> None:
    marker = "4321.375"
    with Runner(tmp_path / "data", isolation="in-process") as runner:
        runner.session("closing").start_process(["sleep", marker])
        assert until(lambda: len(host_processes_with(marker)) >= 1)
    assert until(lambda: host_processes_with(marker) == [], 5)


def test_a_failed_start_is_a_clear_error(runner: Runner) -> None:
    session = runner.session("fails")
    process = session.start_process(["no-such-program-here"])
    assert process.wait(10) == 1
    assert "no-such-program-here" in process.text("stderr")
