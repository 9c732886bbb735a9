"""Background processes are confined like native calls (disk quota, no way out to the network) and
hold the host's resources no longer than they live (descriptors; input never reaching one reused)."""

from __future__ import annotations

import os
import socket
import time

import pytest

from wasm_runner import Runner
from wasm_runner.processes import ProcessError
from wasm_runner.providers.native.bwrap import find_bwrap, probe

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory):
    with Runner(tmp_path_factory.mktemp("confinement"), isolation="in-process") as runner:
        yield runner


def test_a_process_writing_past_the_disk_quota_is_stopped_and_says_so(runner: Runner) -> None:
    session = runner.session("quota")
    # many files of 1 MiB each: no single file trips the per-file size limit, the workspace's total does
    writer = ("import itertools, time\nfor i in itertools.count():\n"
              "    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n    time.sleep(0.01)\n")
    process = session.start_process(["python3", "-c", writer], limits={"disk_bytes": 16 * MiB})
    assert process.wait(30) is not None, "the writer was not stopped"
    info = process.info()
    assert info.state == "killed" and "quota" in (info.error or "")
    written = sum(f.stat().st_size for f in session.path.glob("f*"))
    assert 16 * MiB <= written < 200 * MiB  # stopped soon after passing it, not when the disk filled


def test_a_process_has_no_network_route_out(runner: Runner) -> None:
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()
    host.setblocking(False)
    port = host.getsockname()[1]
    addresses = ["127.0.0.1", "1.1.1.1"]  # the host's loopback port, and anywhere outside
    probe_code = ("import socket, sys\nfor address in sys.argv[1:]:\n"
                  "    try:\n        socket.create_connection((address, int(PORT)), timeout=2).close()\n"
                  "        print(address, 'connected')\n"
                  "    except OSError as exc:\n        print(address, type(exc).__name__, exc.errno)\n").replace(
                      "PORT", str(port))
    try:
        process = runner.session("network").start_process(["python3", "-c", probe_code, *addresses])
        assert process.wait(30) == 0
        loopback, outside = process.text().splitlines()
        assert loopback == "127.0.0.1 ConnectionRefusedError 111"  # its own loopback, where nothing listens
        assert outside == "1.1.1.1 OSError 101"  # ENETUNREACH: no route at all
        with pytest.raises(BlockingIOError):  # the host's listener saw nothing
            host.accept()
    finally:
        host.close()


def test_ended_processes_leave_no_descriptor_open_in_the_host(runner: Runner) -> None:
    session = runner.session("descriptors")
    session.start_process(["true"]).wait(10)  # the first start opens what stays open for good

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    for _ in range(8):
        session.start_process(["echo", "hi"]).wait(10)
        session.start_process(["cat"], pty=(80, 24)).kill(grace_s=0)
    deadline = time.monotonic() + 5
    while open_fds() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_fds() <= before


def test_input_never_reaches_a_descriptor_reused_after_the_terminal_ended(runner: Runner) -> None:
    process = runner.session("reuse").start_process(["sleep", "60"], pty=(80, 24))
    sandbox = process.sandbox
    assert sandbox is not None and sandbox.pty_master is not None
    master = sandbox.pty_master
    outcome: list[object] = []
    clean_up = sandbox._cleanup  # runs as the sandbox ends, after its descriptors were closed

    def write_into_a_reused_descriptor(*args):
        read_end, write_end = os.pipe()
        os.dup2(write_end, master)  # the terminal's old number now names another file, as reuse would
        try:
            outcome.append(process.write_some(b"typed late"))
        except ProcessError as exc:
            outcome.append(exc)
        finally:
            os.close(master)
            os.close(write_end)
            os.set_blocking(read_end, False)
            try:
                outcome.append(os.read(read_end, 100))
            except BlockingIOError:
                outcome.append(b"")
            os.close(read_end)
        return clean_up(*args)

    sandbox._cleanup = write_into_a_reused_descriptor
    process.kill(grace_s=0)
    assert len(outcome) == 2
    assert isinstance(outcome[0], ProcessError) and outcome[1] == b""
