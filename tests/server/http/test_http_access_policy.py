"""The service takes its access policy at construction: another policy changes who may do what
without any handler knowing, and the default is the security policy of `config.auth`."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from server_helpers import call, make_config, new_session

from wasm_runner import Mount
from wasm_runner_protocol.packages import PACKAGES_GUEST_PATH
from wasm_runner_server.app import create_app
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.policy import POLICY, AccessPolicy, OpenAccess, Principal
from wasm_runner_server.security.policy import SecurityPolicy
from wasm_runner_server.sessions.service import SERVICE


class OneSessionOnly(OpenAccess):
    """Refuses a second session, mounts a directory into each, and records the executions it sees."""

    def __init__(self, mounted) -> None:
        self.mounted = mounted

    def check_session_quota(self, request: web.Request) -> None:
        if request.app[SERVICE].sessions.sessions:
            raise ApiError(429, "workspace_session_quota", "one session only")

    def session_mounts(self, session_id: str) -> tuple[Mount, ...]:
        return (Mount(self.mounted, "/data"),)


@pytest.mark.asyncio
async def test_the_default_policy_is_the_security_policy(tmp_path):
    app = create_app(make_config(tmp_path / "data"))
    assert isinstance(app[POLICY], SecurityPolicy)
    assert any(r.resource is not None and r.resource.canonical == "/v1/audit" for r in app.router.routes())


@pytest.mark.asyncio
async def test_a_policy_passed_in_decides_for_every_handler(tmp_path):
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    policy = OneSessionOnly(mounted)
    app = create_app(make_config(tmp_path / "data"), policy)
    assert app[POLICY] is policy
    assert not any(r.resource is not None and r.resource.canonical == "/v1/audit" for r in app.router.routes())
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        session_id = await new_session(client)
        status, data = await call(client, "POST", "/v1/sessions")
        assert status == 429 and data["error"]["message"] == "one session only"
        _, core = app[SERVICE].sessions.core(app[SERVICE].sessions.get(session_id))
        # the policy's mount, beside the session's own read-only packages
        assert [m.guest for m in core.mounts] == ["/data", PACKAGES_GUEST_PATH]
        status, page = await call(client, "GET", "/v1/sessions")
        assert status == 200 and [s["id"] for s in page["sessions"]] == [session_id]
    finally:
        await client.close()


def test_an_access_policy_must_say_who_calls():
    with pytest.raises(TypeError):
        AccessPolicy()  # type: ignore[abstract]
    assert OpenAccess().authenticate(None) == Principal("local", "local", "admin", "local")  # type: ignore[arg-type]
