"""Mount validates itself; the Runner takes session ids by the wire's rule; the core's errors
share one root with the client's and keep their old built-in bases."""

from __future__ import annotations

from pathlib import Path

import pytest

from wasm_runner import (
    ExecRequest,
    InvalidMountError,
    InvalidRequestError,
    InvalidSessionIdError,
    Mount,
    NoProviderError,
    Runner,
    RunnerClosedError,
    WasmRunnerError,
)
from wasm_runner.providers.native.bwrap import Bind, SandboxPolicy
from wasm_runner_client import WasmRunnerError as ClientError


def test_a_mount_normalises_its_guest_path_and_keeps_the_rest(tmp_path):
    mount = Mount(str(tmp_path), "/data/", writable=True)
    assert mount == Mount(tmp_path, "/data", True)
    assert isinstance(mount.host, Path) and mount.guest == "/data"
    assert Mount.from_config(mount.to_config()) == mount


@pytest.mark.parametrize("guest", ["/workspace", "/tmp", "/", "relative", "/a/../workspace"])
def test_a_mount_refuses_a_guest_path_over_a_guest_root(tmp_path, guest):
    with pytest.raises(InvalidMountError) as caught:
        Mount(tmp_path, guest)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, WasmRunnerError)


def test_a_native_bind_is_a_mount_with_the_same_rule(tmp_path):
    assert Bind is Mount
    assert SandboxPolicy(binds=(Bind(tmp_path, "/data"),)).binds[0].guest == "/data"
    with pytest.raises(ValueError):
        Bind(tmp_path, "/workspace/../tmp")


@pytest.mark.parametrize("session_id", ["café", "١٢٣", "ß", "a b", "x" * 65, "abc\n"])
def test_the_runner_refuses_a_session_id_the_wire_refuses(tmp_path, session_id):
    with Runner(tmp_path, isolation="in-process", providers=[]) as runner:
        with pytest.raises(InvalidSessionIdError):
            runner.session(session_id)


@pytest.mark.parametrize("session_id", ["---", "_", "A-z_0", "x" * 64])
def test_the_runner_takes_every_session_id_the_wire_takes(tmp_path, session_id):
    with Runner(tmp_path, isolation="in-process", providers=[]) as runner:
        assert runner.session(session_id).id == session_id


def test_a_request_no_provider_runs_raises_an_invalid_request(tmp_path):
    with Runner(tmp_path, isolation="in-process", providers=[]) as runner:
        with pytest.raises(NoProviderError) as caught:
            runner.provider_for(ExecRequest(code="print(1)"))
    assert isinstance(caught.value, InvalidRequestError) and isinstance(caught.value, ValueError)


def test_a_provider_must_subclass_provider(tmp_path):
    class DuckProvider:
        name = "wasm"
        languages = frozenset({"python"})

        def execute(self, job):
            raise AssertionError

    with pytest.raises(TypeError):
        Runner(tmp_path, isolation="in-process", providers=[DuckProvider()])


def test_the_core_and_the_client_share_one_root_error():
    assert WasmRunnerError is ClientError
    assert issubclass(RunnerClosedError, RuntimeError) and issubclass(RunnerClosedError, WasmRunnerError)


def test_an_alias_mount_is_carried_to_workers_and_never_counted_again(tmp_path):
    from wasm_runner.workspace.quota import counted_mounts

    alias = Mount(tmp_path, "/home/user/workspace", writable=True, alias=True)
    assert Mount.from_config(alias.to_config()) == alias
    own = Mount(tmp_path / "data", "/data", writable=True)
    assert counted_mounts([alias, own]) == ([own.host], [], [])  # the alias's directory is counted as /workspace
