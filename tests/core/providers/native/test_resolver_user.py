"""The package resolver runs in bubblewrap, never as root: a root service runs uv as the sandbox user, who
cannot read the service's data directory (its signing secret, the package cache, other sessions) nor see
the host's files beyond the system's."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from wasm_runner.packages import PackageSettings, SessionPackages
from wasm_runner.packages.installer import PackageInstaller
from wasm_runner.providers.native.identity import SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.resolver_user import as_resolver_user
from wasm_runner_protocol.packages import PackageRequest

PROBE = """import os, sys
def seen(path):
    try:
        with open(path) as f:
            return "read:" + f.read().strip()
    except OSError as exc:
        return type(exc).__name__
sys.stderr.write(f"uid={os.getuid()} secret={seen(sys.argv[1])} host={seen(sys.argv[2])}\\n")
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
    visible = tmp_path / "host-file.txt"  # world-readable, outside anything the resolver needs
    visible.write_text("a host file\n")
    visible.chmod(0o644)
    # the resolver's command replaced by a probe that reports who it runs as and what it can read
    settings = PackageSettings(python_index="http://127.0.0.1:9/simple/",
                               uv=("/usr/bin/python3", "-c", PROBE, str(secret), str(visible)))
    result = PackageInstaller(settings, data, run_as=as_resolver_user).install(
        SessionPackages(tmp_path / "s"), PackageRequest(python=("tinydep==2.0",)))
    assert not result.ok and result.error.kind == "resolver_failed"
    message = result.error.message
    assert "secret=FileNotFoundError host=FileNotFoundError" in message, message  # in bubblewrap: neither exists
    assert "uid=0 " not in message and "the-signing-secret" not in message


def test_without_bubblewrap_uv_still_runs_as_the_sandbox_user(open_dir, monkeypatch):
    from wasm_runner.providers.native import resolver_user

    if os.geteuid() != 0:
        pytest.skip("the service is not root here: uv runs as the service's own unprivileged user")
    identity = sandbox_identity()
    assert isinstance(identity, SandboxIdentity), identity
    monkeypatch.setattr(resolver_user, "usable_bwrap", lambda identity: None)
    data = open_dir / "data"
    data.mkdir(mode=0o700)
    secret = data / "presign.secret"
    secret.write_text("the-signing-secret\n")
    settings = PackageSettings(python_index="http://127.0.0.1:9/simple/",
                               uv=("/usr/bin/python3", "-c", PROBE, str(secret), "/etc/hostname"))
    result = PackageInstaller(settings, data, run_as=as_resolver_user).install(
        SessionPackages(open_dir / "s"), PackageRequest(python=("tinydep==2.0",)))
    assert f"uid={identity.uid} secret=PermissionError" in result.error.message, result.error.message


def test_a_runners_installer_starts_the_resolver_as_the_sandbox_user(tmp_path):
    from wasm_runner import Runner

    runner = Runner(data_dir=tmp_path / "data")
    try:
        assert runner.packages.run_as is as_resolver_user
    finally:
        runner.close()
