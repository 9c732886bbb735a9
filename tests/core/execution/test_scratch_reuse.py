"""One-shot scratch workspaces carry nothing from one request to the next: a native run's
directory is never reused, and any other is reused only exactly as it was made."""

from __future__ import annotations

import os
import stat

import pytest

from wasm_runner import Runner
from wasm_runner.execution.scratch import scratch_state
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.bwrap import find_bwrap, probe

bwrap_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed" if bwrap_path is None else probe(bwrap_path)
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

LOOK = ("python3 -c \"import os, stat; s = os.stat('/workspace'); "
        "print(oct(stat.S_IMODE(s.st_mode)), int(s.st_mtime), os.listxattr('/workspace'))\"; ls -a /workspace")


@needs_sandbox
def test_native_traces_on_the_scratch_directory_never_reach_the_next_one_shot(tmp_path):
    with Runner(tmp_path / "data", isolation="in-process", providers=[NativeProvider()]) as runner:
        fresh = runner.run_sync(LOOK, language="bash")
        assert fresh.exit_code == 0, fresh.stderr
        fresh_mode, fresh_mtime, fresh_xattrs = fresh.stdout.splitlines()[0].split(" ", 2)
        traces = runner.run_sync(
            "python3 -c \"import os; os.setxattr('/workspace', 'user.tenant', b'secret')\" && "
            "touch -d 2001-01-01 /workspace && chmod 000 /workspace && echo left", language="bash")
        assert traces.exit_code == 0 and traces.stdout == "left\n", traces.stderr
        after = runner.run_sync(LOOK, language="bash")  # another tenant's one-shot
        assert after.exit_code == 0, after.stderr
        mode, mtime, xattrs = after.stdout.splitlines()[0].split(" ", 2)
        assert mode == fresh_mode and xattrs == fresh_xattrs == "[]"
        assert int(mtime) >= int(fresh_mtime) > 978307200  # not 2001: a new directory
        assert "secret" not in after.stdout
        # And nothing of the traced directory is kept around for later runs either.
        for workspace in runner.scratch.idle:
            assert stat.S_IMODE(workspace.files.stat().st_mode) != 0
            assert os.listxattr(workspace.files) == []


def test_a_changed_idle_scratch_workspace_is_not_reused(tmp_path):
    with Runner(tmp_path / "data", isolation="in-process", concurrency=8) as runner:  # room for every kept workspace
        workspace = runner.scratch.new()
        made = scratch_state(workspace)
        assert scratch_state(workspace) == made
        for change in (lambda p: os.chmod(p, 0o000), lambda p: os.setxattr(p, "user.x", b"1"),
                       lambda p: os.utime(p, (1, 1))):
            workspace = runner.scratch.new()
            change(workspace.files)
            runner.scratch.keep(workspace)
            kept = [w.root for w in runner.scratch.idle]
            assert workspace.root not in kept
            assert not workspace.root.exists()
        # An untouched one is kept, and its state is what it was when made.
        untouched = runner.scratch.new()
        runner.scratch.keep(untouched)
        assert untouched.root in [w.root for w in runner.scratch.idle]


def test_a_runner_without_ready_scratch_makes_nothing_ahead(tmp_path):
    with Runner(tmp_path / "data", isolation="in-process", ready_scratch=0) as runner:
        assert runner.run_sync("print(1)").stdout == "1\n"
        assert not runner.scratch.idle and not list(runner.scratch_dir.iterdir())
        assert runner.run_sync("print(2)").stdout == "2\n"
