"""E2B's control plane, driven by the real `e2b` SDK: a sandbox is a session of the caller's workspace."""

from __future__ import annotations

import time

import httpx
import pytest
from e2b import Sandbox, SandboxQuery
from e2b.exceptions import (
    AuthenticationException,
    NotFoundException,
    SandboxException,
    SandboxNotRunningException,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_create_get_info_connect_list_and_kill(e2b_service):
    sandbox = Sandbox.create(metadata={"purpose": "test"}, timeout=120)
    info = sandbox.get_info()
    assert info.sandbox_id == sandbox.sandbox_id
    assert info.template_id == "base" and info.metadata == {"purpose": "test"}
    assert 110 <= (info.end_at - info.started_at).total_seconds() <= 121

    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.sandbox_id == sandbox.sandbox_id and again.is_running()

    listed = Sandbox.list(query=SandboxQuery(metadata={"purpose": "test"})).next_items()
    assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
    assert Sandbox.list(query=SandboxQuery(metadata={"purpose": "other"})).next_items() == []

    sandbox.kill()
    assert not sandbox.is_running()
    with pytest.raises(SandboxNotRunningException):
        sandbox.files.read("anything.txt")
    with pytest.raises(SandboxNotRunningException):
        sandbox.files.list("/workspace")
    with pytest.raises(SandboxNotRunningException):
        sandbox.commands.run("true")
    assert Sandbox.kill(sandbox.sandbox_id) is False  # already gone
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id)


def test_set_timeout_moves_the_end(e2b_service):
    sandbox = Sandbox.create(timeout=60)
    before = sandbox.get_info().end_at
    sandbox.set_timeout(3600)
    after = sandbox.get_info().end_at
    assert (after - before).total_seconds() > 3000
    sandbox.set_timeout(30)
    assert (sandbox.get_info().end_at.timestamp() - time.time()) <= 31
    sandbox.kill()


def test_list_pages_with_the_next_token(e2b_service):
    made = [Sandbox.create(metadata={"batch": "pages"}).sandbox_id for _ in range(3)]
    paginator = Sandbox.list(query=SandboxQuery(metadata={"batch": "pages"}), limit=2)
    first = paginator.next_items()
    assert len(first) == 2 and paginator.has_next
    second = paginator.next_items()
    assert not paginator.has_next
    assert sorted(s.sandbox_id for s in first + second) == sorted(made)


def test_another_workspace_neither_sees_nor_reaches_a_sandbox(e2b_service):
    sandbox = Sandbox.create()
    other = {"api_key": e2b_service.keys["beta"]}
    assert Sandbox.list(**other).next_items() == []
    with pytest.raises(NotFoundException):
        Sandbox.connect(sandbox.sandbox_id, **other)
    assert Sandbox.kill(sandbox.sandbox_id, **other) is False
    assert sandbox.is_running()
    # a second key of the same workspace reaches it, as the API's tenancy says
    assert Sandbox.connect(sandbox.sandbox_id, api_key=e2b_service.keys["alpha_2"]).is_running()


def test_a_wrong_key_and_an_unknown_template_are_refused(e2b_service):
    with pytest.raises(AuthenticationException, match="not valid"):
        Sandbox.create(api_key="wr_not-a-key")
    with pytest.raises(SandboxException, match="not known here"):
        Sandbox.create(template="no-such-template")
    with pytest.raises(SandboxException, match="network is not supported here"):
        Sandbox.create(network={"deny_out": ["0.0.0.0/0"]})
    with pytest.raises(SandboxException, match="environment variables are not supported"):
        Sandbox.create(envs={"A": "b"})
    assert Sandbox.list().next_items() == []  # nothing was created by the refused calls


def test_a_template_maps_to_its_profile_and_no_internet_access_denies_egress(start_e2b):
    service = start_e2b(
        profiles={"bash-net": {"language": "bash", "provider": "native",
                               "network": {"mode": "allowlist", "allow": ["127.0.0.1:9"]}}},
        e2b={"templates": {"base": "bash", "with-net": "bash-net"}})

    def session(sandbox: Sandbox) -> dict:
        return httpx.get(f"{service.url}/v1/sessions/{sandbox.sandbox_id}",
                         headers={"Authorization": f"Bearer {service.keys['alpha']}"}).json()

    networked = Sandbox.create(template="with-net")
    assert session(networked)["profile"] == "bash-net" and session(networked)["egress"]["mode"] == "allowlist"
    assert networked.get_info().template_id == "with-net"
    offline = Sandbox.create(template="with-net", allow_internet_access=False)
    assert session(offline)["egress"]["mode"] == "deny"
    networked.kill()
    offline.kill()


def test_with_keys_off_any_key_is_the_local_caller(start_e2b, monkeypatch):
    start_e2b(auth={"enabled": False})
    monkeypatch.setenv("E2B_API_KEY", "local")  # the SDKs need some key; the service has none to check
    sandbox = Sandbox.create()
    sandbox.files.write("local.txt", "works")
    assert sandbox.commands.run("cat local.txt").stdout == "works"
    sandbox.kill()
