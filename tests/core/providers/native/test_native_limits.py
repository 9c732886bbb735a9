"""Hostile native programs: each is contained, reported as a result, and the host carries on."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from host_processes import host_processes_with

from wasm_runner import Limits, Runner
from wasm_runner.providers.native import NativeProvider, SandboxPolicy
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.providers.native.identity import SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.limits import PREFIX, detect, wait_for_cleanup
from wasm_runner_protocol.execution import MiB

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

SUPPORT = detect()
POLICY = SandboxPolicy(max_processes=64, kill_grace_s=0.5)


@pytest.fixture(scope="module")
def native_runner(tmp_path_factory):
    with Runner(tmp_path_factory.mktemp("native-limits"), isolation="in-process", providers=[NativeProvider(POLICY)]) as runner:
        yield runner


@pytest.fixture(scope="module")
def rlimit_runner(tmp_path_factory):
    provider = NativeProvider(POLICY, cgroups="off")
    with Runner(tmp_path_factory.mktemp("native-rlimit"), isolation="in-process", providers=[provider]) as runner:
        yield runner


def _marker() -> str:
    """A unique sleep duration, so its processes can be found on the host afterwards."""
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def _zombie_children() -> list[int]:
    zombies = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                zombies.append(int(entry))
    return zombies


def _host_is_fine() -> None:
    assert subprocess.run(["true"], check=False).returncode == 0


def test_timeout_sends_sigterm_then_sigkill_to_the_whole_tree_leaving_nothing(native_runner):
    marker = _marker()
    started = time.monotonic()
    result = native_runner.run_sync(
        f"trap '' TERM; (trap '' TERM; sleep {marker}) & sleep {marker} & wait", language="bash",
        limits=Limits(timeout_s=1))
    elapsed = time.monotonic() - started
    assert result.limit == "timeout" and result.error.type == "LimitExceeded"
    assert result.exit_code in (137, 143)
    assert 1.0 <= elapsed < 1.0 + POLICY.kill_grace_s + 2.0
    assert not host_processes_with(marker)
    assert not _zombie_children()
    _host_is_fine()


def test_background_sleep_cannot_outlive_its_run(native_runner):
    marker = _marker()
    result = native_runner.run_sync(
        f"sleep {marker} &\ndisown\nsetsid sleep {marker} &\nnohup sleep {marker} >/dev/null 2>&1 &\necho detached",
        language="bash", limits=Limits(timeout_s=10))
    assert result.exit_code == 0 and result.stdout == "detached\n"
    assert result.duration_ms < 5000  # the run ended with its main process, not the sleeps
    time.sleep(0.1)
    assert not host_processes_with(marker)
    assert not _zombie_children()


def test_fork_bomb_is_contained_while_another_session_carries_on(native_runner):
    bomb = native_runner.session()
    other = native_runner.session()
    with _PeakProcesses() as peak, concurrent.futures.ThreadPoolExecutor(2) as pool:
        bombing = pool.submit(bomb.run_sync, ":(){ :|:& };:\nsleep 30", language="bash", limits=Limits(timeout_s=3))
        time.sleep(0.5)
        started = time.monotonic()
        calm = other.run_sync("echo alive; ls /workspace | wc -l", language="bash", limits=Limits(timeout_s=10))
        calm_elapsed = time.monotonic() - started
        _host_is_fine()
        result = bombing.result(timeout=30)
    assert calm.exit_code == 0 and calm.stdout.startswith("alive\n")
    assert calm_elapsed < 3
    assert result.limit == "timeout"
    if result.enforcement != "rlimit":
        assert "process limit" in result.error.message
    assert peak.peak - peak.base < 1000  # bounded (other programs on the host add noise)
    time.sleep(0.2)
    assert not _zombie_children()
    _host_is_fine()


def test_two_gigabyte_allocation_hits_the_memory_limit(native_runner):
    result = native_runner.run_sync(
        "python3 -c 'b = bytearray(2 * 1024**3); print(\"allocated\")'", language="bash",
        limits=Limits(timeout_s=20, memory_bytes=128 * MiB))
    assert result.limit == "memory", (result.stdout, result.stderr)
    assert "allocated" not in result.stdout
    assert result.memory_peak_bytes is not None and result.memory_peak_bytes <= 160 * MiB
    _host_is_fine()


def test_filling_tmp_hits_the_disk_quota_and_shm_is_small(native_runner):
    session = native_runner.session()
    result = session.run_sync(
        "head -c 80M /dev/zero > /dev/shm/fill 2>/dev/null || echo shm-full\n"
        "rm -f /dev/shm/fill\n"
        "head -c 300M /dev/zero > /tmp/fill\necho after",
        language="bash", limits=Limits(timeout_s=20, disk_bytes=32 * MiB))
    assert "shm-full" in result.stdout
    assert result.limit == "disk", (result.stdout, result.stderr)
    assert (session.workspace.tmp / "fill").stat().st_size <= 33 * MiB
    _host_is_fine()


def test_disk_quota_counts_the_workspace_like_the_wasm_provider(native_runner):
    result = native_runner.run_sync(
        "for i in $(seq 1 50); do head -c 1M /dev/zero > f$i; done; echo done",
        language="bash", limits=Limits(timeout_s=20, disk_bytes=16 * MiB))
    assert result.limit == "disk"


def test_output_past_the_cap_is_truncated_and_stops_the_program(native_runner):
    result = native_runner.run_sync("yes hello", language="bash", limits=Limits(timeout_s=10, output_bytes=10_000))
    assert result.limit == "output" and result.truncated == ["stdout"]
    assert len(result.stdout) == 10_000 and result.stdout.startswith("hello\n")
    assert result.duration_ms < 5000


def test_enforcement_and_peak_memory_are_reported(native_runner):
    result = native_runner.run_sync("python3 -c 'b = bytearray(64 * 1024**2); print(len(b))'", language="bash")
    assert result.exit_code == 0, result.stderr
    assert result.enforcement == SUPPORT.enforcement
    assert result.memory_peak_bytes >= 64 * MiB


@pytest.mark.skipif(SUPPORT.enforcement == "rlimit", reason=f"no usable cgroup here: {SUPPORT.reason}")
def test_cpu_quota_holds_two_busy_loops_to_a_quarter_cpu(tmp_path):
    with Runner(tmp_path, isolation="in-process", providers=[NativeProvider(SandboxPolicy(cpus=0.25))]) as runner:
        result = runner.run_sync(
            "TIMEFORMAT='%U %S'\n"
            "time { for i in 1 2; do timeout 2 sh -c 'while :; do :; done' & done; wait; }",
            language="bash", limits=Limits(timeout_s=20))
    user, system = (float(x) for x in result.stderr.split()[-2:])
    assert user + system < 0.8  # 2 s of wall time at a quarter CPU is 0.5 s of CPU, not up to 4 s


@pytest.mark.skipif(SUPPORT.enforcement == "rlimit", reason=f"no usable cgroup here: {SUPPORT.reason}")
def test_run_cgroups_are_removed_after_the_runs(native_runner):
    native_runner.run_sync("true", language="bash")
    assert wait_for_cleanup(10)
    for parent in SUPPORT.parents.values():
        leftovers = [p.name for p in parent.iterdir() if p.name.startswith(f"{PREFIX}{os.getpid()}-")]
        assert leftovers == []


def test_rlimit_fallback_still_bounds_processes_and_memory(rlimit_runner):
    info = rlimit_runner.run_sync("ulimit -u 2>/dev/null || ulimit -p; ulimit -d", language="bash")
    assert info.enforcement == "rlimit"
    assert info.stdout.split()[0] == str(POLICY.max_processes)
    memory = rlimit_runner.run_sync(
        "python3 -c 'b = bytearray(2 * 1024**3); print(\"allocated\")'", language="bash",
        limits=Limits(timeout_s=20, memory_bytes=128 * MiB))
    assert memory.limit == "memory" and "allocated" not in memory.stdout
    peak = _PeakProcesses()
    with peak:
        bomb = rlimit_runner.run_sync(":(){ :|:& };:\nsleep 30", language="bash", limits=Limits(timeout_s=5))
    assert bomb.limit == "timeout"
    if os.geteuid() == 0 and not isinstance(sandbox_identity(), SandboxIdentity):
        # RLIMIT_NPROC does not bind root: the provider counts and stops the run early (a root
        # service with its sandbox user runs guests unprivileged, where RLIMIT_NPROC binds)
        assert "more than 64 processes" in bomb.error.message
        assert bomb.duration_ms < 4000
    assert peak.peak - peak.base < 3000  # bounded, not the whole process table
    _host_is_fine()


class _PeakProcesses:
    """Samples the host's process count while a block runs."""

    def __enter__(self):
        self.base = self.peak = self._count()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()

    def _sample(self):
        while not self._done.wait(0.02):
            self.peak = max(self.peak, self._count())

    @staticmethod
    def _count() -> int:
        return sum(1 for entry in os.listdir("/proc") if entry.isdigit())


def _children_cpu_s(stdout: str) -> float:
    """The children's user + system time from the last line of sh's `times` ("0m0.19s 0m0.01s")."""
    total = 0.0
    for part in stdout.strip().splitlines()[-1].split():
        minutes, _, seconds = part.rstrip("s").partition("m")
        total += int(minutes) * 60 + float(seconds)
    return total


def test_a_runs_cpu_time_counts_the_processes_the_sandbox_started(native_runner):
    """What usage metering bills as cpu_seconds: the CPU of every process of the run (here a grandchild
    busy in a loop), not only of the launcher the host waited for."""
    loop = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"
    result = native_runner.run_sync(f"sh -c '{loop}'; times", language="bash")
    assert result.exit_code == 0, result.stderr
    children = _children_cpu_s(result.stdout)
    assert children > 0.05  # the loop did use CPU, as the guest itself measured it
    assert result.cpu_ms is not None and result.cpu_ms / 1000 >= children - 0.02
