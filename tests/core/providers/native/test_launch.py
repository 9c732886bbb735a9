"""The host-side launcher of native runs: the compiled one (launch.c) and the shell chain it
replaces where no compiler is do the same steps, fail the same way, and carry a whole run."""

from __future__ import annotations

import os
import subprocess

import pytest

from wasm_runner import ExecRequest, Limits, Runner
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native import launch as launch_module
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.providers.native.c_helpers import ensure_launcher
from wasm_runner.providers.native.identity import SandboxIdentity, relay, sandbox_identity
from wasm_runner.providers.native.launch import Drop, launch_prefix

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
IDENTITY = sandbox_identity()
ROOT_DROP = isinstance(IDENTITY, SandboxIdentity) and IDENTITY.dropped


@pytest.fixture(params=["compiled launcher", "shell launcher"])
def launcher_kind(request):
    """Each test runs with the launcher a machine with a compiler uses and with the fallback."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "shell launcher":
            patch.setattr(launch_module, "ensure_launcher", lambda: None)
        else:
            assert ensure_launcher() is not None, "the C launcher should build here (cc is installed)"
        yield request.param


def _launch(prefix: list[str], script: str) -> subprocess.CompletedProcess[str]:
    # As root, with a supplementary group for the drop to clear.
    groups = {"extra_groups": [0, 4]} if os.geteuid() == 0 else {}
    return subprocess.run([*prefix, "/bin/sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"}, **groups)


def test_the_prefix_names_the_launcher_that_runs(launcher_kind):
    prefix = launch_prefix(file_bytes=1000)
    assert ("wasm-runner-launch" in prefix) == (launcher_kind == "shell launcher")
    assert launch_prefix() == []  # nothing to do: no extra process


def test_the_file_size_cap_is_the_same_limit(launcher_kind):
    done = _launch(launch_prefix(file_bytes=10_000), "ulimit -f; ulimit -H -f")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["20", "20"]  # 512-byte blocks, soft and hard: 10,000 bytes and a block more


def test_a_cgroup_that_cannot_be_joined_stops_the_run_with_125(launcher_kind, tmp_path):
    missing = tmp_path / "no-such-cgroup" / "tasks"
    done = _launch(launch_prefix(joins=[(str(missing), "0")]), "echo ran")
    assert done.returncode == 125
    assert "ran" not in done.stdout
    assert "could not set up the run's limits" in done.stderr


@pytest.mark.skipif(not ROOT_DROP, reason="the drop to the sandbox user is a root service's")
def test_the_drop_binds_in_a_private_namespace_then_becomes_the_sandbox_user(launcher_kind, tmp_path):
    assert isinstance(IDENTITY, SandboxIdentity)
    source = tmp_path / "closed"  # under a directory the sandbox user cannot enter
    source.mkdir()
    (source / "hello.txt").write_text("hi")
    tmp_path.chmod(0o700)
    point = relay.point(0, directory=True)  # in the world-traversable relay directory runs use
    prefix = launch_prefix(file_bytes=None, drop=Drop(IDENTITY, [(str(source), str(point))]))
    done = _launch(prefix, f"id -u; id -g; id -G; cat {point}/hello.txt")
    assert done.returncode == 0, done.stderr
    uid, gid, groups, text = done.stdout.split("\n")[:4]
    assert (int(uid), int(gid), groups.split()) == (IDENTITY.uid, IDENTITY.gid, [str(IDENTITY.gid)])
    assert text == "hi"
    assert list(point.iterdir()) == []  # the bind lived in the run's own mount namespace only
    blocked = _launch(launch_prefix(drop=Drop(IDENTITY, [])), f"cat {source}/hello.txt")
    assert blocked.returncode != 0 and "Permission denied" in blocked.stderr  # what the relay is for


@pytest.mark.skipif(not ROOT_DROP, reason="the drop to the sandbox user is a root service's")
def test_a_bind_that_fails_stops_the_run_with_125(launcher_kind, tmp_path):
    assert isinstance(IDENTITY, SandboxIdentity)
    done = _launch(launch_prefix(drop=Drop(IDENTITY, [(str(tmp_path / "missing"), str(tmp_path))])), "echo ran")
    assert done.returncode == 125
    assert "ran" not in done.stdout
    assert "could not bind" in done.stderr and str(tmp_path / "missing") in done.stderr


@pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
def test_a_whole_run_holds_its_limits_with_either_launcher(launcher_kind, tmp_path):
    with Runner(tmp_path, isolation="in-process", providers=[NativeProvider()]) as runner:
        ok = runner.run_sync(ExecRequest(command=["sh", "-c", "id -u; echo hi > out.txt; cat out.txt"]))
        assert ok.exit_code == 0, ok.stderr
        assert ok.stdout.split() == ["1000", "hi"]  # bwrap's sandbox uid, over the host's sandbox user
        big = runner.run_sync(ExecRequest(
            command=["sh", "-c", "head -c 3000000 /dev/zero > big.bin; echo $?; wc -c < big.bin"],
            limits=Limits(disk_bytes=1_000_000)))
        status, size = big.stdout.split()
        assert status != "0" and int(size) <= 1_000_000 + 512, big
