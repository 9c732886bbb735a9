"""Network policies through the clients, sync and async, against a real server on 127.0.0.1: a session
created with `egress`, changed with `update_session`, a call narrowing it, and the refusals as errors.
A loopback origin stands in for the outside."""

from __future__ import annotations

import anyio
import pytest
from loopback_origin import Origin

from wasm_runner_client import AsyncClient, Client, EgressPolicy, PermissionDeniedError

DENY = EgressPolicy(mode="deny")
FETCH = "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:{port}/small', timeout=5).status)"


@pytest.fixture
def origin(tmp_path):
    server = Origin(tmp_path)
    yield server
    server.close()


@pytest.fixture
def served(start_server, origin):
    allow = EgressPolicy(mode="allowlist", allow=(f"127.0.0.1:{origin.port}",))
    profiles = {"net": {"language": "python", "network": {"mode": "allowlist", "allow": list(allow.allow)}}}
    return start_server(profiles=profiles, default_profile="net"), allow, FETCH.format(port=origin.port)


def allowed(result) -> list[bool]:
    return [event.allowed for event in result.network]


def test_sync_client_creates_updates_and_narrows_a_sessions_policy(served):
    server, allow, fetch = served
    with Client(server.url) as client:
        info = client.create_session(egress=DENY)
        assert info.egress == DENY
        assert allowed(client.exec(info.id, fetch)) == [False]

        assert client.update_session(info.id, egress=allow).egress == allow
        assert allowed(client.exec(info.id, fetch)) == [True]
        assert allowed(client.exec(info.id, fetch, egress=DENY)) == [False]  # this call only
        assert allowed(client.run(fetch, egress=DENY)) == [False]

        assert client.update_session(info.id, egress=None).egress == allow  # back to the profile's
        assert client.get_session(info.id).egress == allow

        wider = EgressPolicy(mode="allowlist", allow=("127.0.0.1",))
        with pytest.raises(PermissionDeniedError) as caught:
            client.update_session(info.id, egress=wider)
        assert caught.value.code == "network_not_allowed"
        with pytest.raises(PermissionDeniedError):
            client.create_session(egress=wider)
        with pytest.raises(PermissionDeniedError):
            client.exec(info.id, fetch, egress=wider)


def test_async_client_creates_and_updates_a_sessions_policy(served):
    server, allow, fetch = served

    async def main() -> None:
        async with AsyncClient(server.url) as client:
            info = await client.create_session(egress=DENY)
            assert info.egress == DENY
            assert allowed(await client.exec(info.id, fetch)) == [False]
            assert (await client.update_session(info.id, egress=allow)).egress == allow
            assert allowed(await client.exec(info.id, fetch)) == [True]
            assert allowed(await client.run(fetch, egress=DENY)) == [False]
            with pytest.raises(PermissionDeniedError):
                await client.update_session(info.id, egress=EgressPolicy(mode="open"))

    anyio.run(main)
