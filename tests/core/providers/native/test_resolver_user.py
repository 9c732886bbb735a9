"""The package resolver never runs as root: a root service runs uv as the sandbox user, who cannot read the
service's data directory (its signing secret, the package cache, other sessions)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from wasm_runner.packages import PackageSettings, SessionPackages
from wasm_runner.packages.installer import PackageInstaller
from wasm_runner.providers.native.identity import SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.resolver_user import as_resolver_user
from wasm_runner_protocol.packages import PackageRequest

PROBE = """import os, sys
try:
    with open(sys.argv[1]) as f:
        seen = "read:" + f.read().strip()
except OSError as exc:
    seen = "denied"
sys.stderr.write(f"uid={os.getuid()} secret={seen}\\n")
sys.exit(2)
"""


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's own is closed): only the data directory's mode
    closes the secret, as in a deployment."""
    path = Path(tempfile.mkdtemp(prefix="wasm-runner-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_uv_runs_as_the_sandbox_user_and_cannot_read_the_data_directory(open_dir):
    identity = sandbox_identity()
    if os.geteuid() != 0:
        pytest.skip("the service is not root here: uv runs as the service's own unprivileged user")
    assert isinstance(identity, SandboxIdentity), identity
    tmp_path = open_dir
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    secret = data / "presign.secret"
    secret.write_text("the-signing-secret\n")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    # the resolver's command replaced by a probe that reports who it runs as and what it can read
    settings = PackageSettings(python_index="http://127.0.0.1:9/simple/", uv=(sys.executable, str(probe), str(secret)))
    result = PackageInstaller(settings, data, run_as=as_resolver_user).install(
        SessionPackages(tmp_path / "s"), PackageRequest(python=("tinydep==2.0",)))
    assert not result.ok and result.error.kind == "resolver_failed"
    assert f"uid={identity.uid} secret=denied" in result.error.message, result.error.message
    assert "the-signing-secret" not in result.error.message


def test_a_runners_installer_starts_the_resolver_as_the_sandbox_user(tmp_path):
    from wasm_runner import Runner

    runner = Runner(data_dir=tmp_path / "data")
    try:
        assert runner.packages.run_as is as_resolver_user
    finally:
        runner.close()
