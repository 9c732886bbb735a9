"""A key sees only its workspace: every route naming another workspace's session answers the
same 404 as a session that does not exist. The routes come from the application's route table,
so a new route cannot skip the check."""

from __future__ import annotations

import re

import pytest
from server_helpers import make_config

from wasm_runner_server.app import create_app

_APP = create_app(make_config("/tmp/wasm-runner-route-table", auth={"enabled": True}, e2b={"enabled": True}))
ROUTES = sorted({(r.method, r.resource.canonical) for r in _APP.router.routes() if r.resource is not None})
# presigned links name their session inside the signature (download and terminal links are tested with
# their own forgeries: test_keys_and_links.py, test_terminals.py; previews are served on origins of their
# own, never by an API route: test_processes_and_ports.py, test_preview_origins.py)
SESSION_ROUTES = [r for r in ROUTES if "{id}" in r[1]
                  and not r[1].startswith(("/v1/links/", "/v1/preview-links/", "/v1/pty-links/"))]

NOT_SESSION_SCOPED = {
    # public
    "/healthz", "/readyz", "/metrics", "/openapi.json",
    # scoped by the caller's workspace inside the handler (tested below)
    "/v1/sessions", "/v1/exec", "/v1/batch", "/v1/profiles", "/v1/audit", "/v1/audit/{entry}",
    "/v1/shared/files", "/v1/shared/files/{path}",
    "/v1/admin/workspaces", "/v1/admin/keys", "/v1/admin/keys/{key}",
    # members and roles: the caller's workspace, or the one an operator names (tests/server/security/
    # test_members_and_roles.py: an owner naming another workspace is refused)
    "/v1/admin/members", "/v1/admin/members/{member}", "/v1/admin/roles", "/v1/admin/roles/{name}",
    "/v1/starters",  # the server's web starters: no one's data
    "/v1/me",  # the caller itself, nothing of anyone else's (tests/server/security/test_key_members.py)
    # usage: the caller's workspace (admin: any), budgets: admin keys only (test_usage_metering.py)
    "/v1/usage", "/v1/admin/workspaces/{workspace}/budgets",
    "/mcp",
    # presigned links: their signature names workspace, session and path
    "/v1/links/{token}/{id}/{path}",
    # preview links from before previews had origins of their own: answered 410, nothing served
    "/v1/preview-links/{rest}",
    # artifacts: scoped by the caller's workspace in the handler, links by their signature
    # (tests/server/artifacts)
    "/v1/artifacts", "/v1/artifacts/{artifact}", "/v1/artifacts/{artifact}/content", "/v1/artifacts/{artifact}:presign",
    "/v1/artifact-links/{token}/{artifact}",
    # the console's page and assets: public, they hold no data
    "/console", "/console/", "/console/static/{name}", "/console/vendor/{name}",
    # the console's sign-in: a key (or a link it asked for) for a cookie of the key's own workspace
    # (tests/server/console)
    "/v1/console/session", "/v1/console/sign-in-links",
    # OAuth: apps are registered by admins; grants are the calling member's own; the authorization page acts
    # for the signed-in member, the token endpoints for the authenticated app (test_oauth_flow.py)
    "/v1/admin/oauth/clients", "/v1/admin/oauth/clients/{client}", "/v1/oauth/grants", "/v1/oauth/grants/{grant}",
    "/oauth/authorize", "/oauth/token", "/oauth/revoke",
    # templates: the caller's workspace's directory, chosen in the handler (test_fork_and_templates.py)
    "/v1/templates", "/v1/templates/{name}",
    # a one-shot run's answers: waiting under its id within the caller's workspace
    # (tests/client/test_client_one_shot_tools.py)
    "/v1/exec/{run_id}/tool-calls/{call_id}", "/v1/exec/{run_id}/approvals/{approval_id}",
}
GATEWAY_PREFIX = "/e2b/"
"""The E2B gateway's routes act only by calling the routes above with the caller's key
(tests/server/e2b/test_e2b_tenancy.py, test_e2b_filesystem.py, test_e2b_control_plane.py)."""


def test_every_route_is_session_scoped_or_classified():
    unclassified = [r for r in ROUTES if "{id}" not in r[1] and r[1] not in NOT_SESSION_SCOPED
                    and not r[1].startswith(GATEWAY_PREFIX)]
    assert not unclassified, f"new routes must be classified for tenant isolation: {unclassified}"
    assert len(SESSION_ROUTES) >= 12


def _method(method: str) -> str:
    """A route for any method (`*`, the preview proxy) is called with GET."""
    return "GET" if method == "*" else method


def _concrete(canonical: str, session_id: str) -> str:
    path = canonical.replace("{id}", session_id).replace("{pid}", "p1").replace("{port}", "8000")
    path = re.sub(r"\{path\}", "notes.txt", path)
    return re.sub(r"\{\w+\}", "x1", path)  # a call's or an approval's id


@pytest.mark.parametrize(("method", "canonical"), SESSION_ROUTES, ids=[f"{m} {c}" for m, c in SESSION_ROUTES])
async def test_other_workspaces_session_answers_404_like_a_missing_one(secure, method, canonical):
    status, data, _ = await secure.call("POST", "/v1/sessions", "a_member", json={})
    assert status == 201, data
    theirs = data["id"]
    await secure.call("PUT", f"/v1/sessions/{theirs}/files/notes.txt", "a_member", data=b"secret of alpha")
    missing = "0" * 32
    seen = []
    for session_id in (theirs, missing):
        status, body, _ = await secure.call(_method(method), _concrete(canonical, session_id), "b_member", json={})
        seen.append((status, body))
    (status_theirs, body_theirs), (status_missing, body_missing) = seen
    assert status_theirs == status_missing == 404
    if method != "HEAD":
        expected = {"error": {"code": "session_not_found", "message": f"no session {theirs!r}",
                              "hint": "create one with POST /v1/sessions"}}
        assert body_theirs == expected
        assert body_missing == {"error": {**expected["error"], "message": f"no session {missing!r}"}}
    # the owner still reaches it
    status, _, _ = await secure.call("GET", f"/v1/sessions/{theirs}", "a_member")
    assert status == 200


async def test_listing_shows_only_the_callers_sessions(secure):
    mine = {(await secure.call("POST", "/v1/sessions", "a_member", json={}))[1]["id"] for _ in range(3)}
    theirs = (await secure.call("POST", "/v1/sessions", "b_member", json={}))[1]["id"]
    status, data, _ = await secure.call("GET", "/v1/sessions?limit=2", "a_member")
    assert status == 200 and len(data["sessions"]) == 2 and data["next_cursor"]
    status, rest, _ = await secure.call("GET", f"/v1/sessions?cursor={data['next_cursor']}", "a_member")
    listed = {s["id"] for s in data["sessions"] + rest["sessions"]}
    assert listed == mine and theirs not in listed and rest["next_cursor"] is None
    _, b_list, _ = await secure.call("GET", "/v1/sessions", "b_member")
    assert [s["id"] for s in b_list["sessions"]] == [theirs]


async def test_other_workspaces_audit_entry_answers_404(secure):
    sid = (await secure.call("POST", "/v1/sessions", "a_member", json={}))[1]["id"]
    status, _, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": "print(1)"})
    assert status == 200
    _, page, _ = await secure.call("GET", "/v1/audit", "a_member")
    entry = page["entries"][0]["id"]
    status, body, _ = await secure.call("GET", f"/v1/audit/{entry}", "b_member")
    status_missing, body_missing, _ = await secure.call("GET", "/v1/audit/999999", "b_member")
    assert status == status_missing == 404
    assert body["error"]["code"] == body_missing["error"]["code"] == "audit_entry_not_found"
    _, b_page, _ = await secure.call("GET", "/v1/audit", "b_member")
    assert b_page["entries"] == []
    status, _, _ = await secure.call("GET", "/v1/audit?workspace=alpha", "b_member")
    assert status == 403


async def test_session_quota_answers_429_with_retry_after(start_secure):
    secure = await start_secure(auth={"quotas": {"sessions": 2}})
    for _ in range(2):
        assert (await secure.call("POST", "/v1/sessions", "a_member", json={}))[0] == 201
    status, body, headers = await secure.call("POST", "/v1/sessions", "a_member", json={})
    assert status == 429 and body["error"]["code"] == "workspace_session_quota" and int(headers["Retry-After"]) > 0
    assert (await secure.call("POST", "/v1/sessions", "b_member", json={}))[0] == 201  # another workspace is not affected


async def test_concurrent_execution_quota_answers_429(start_secure):
    import asyncio

    secure = await start_secure(auth={"quotas": {"concurrent_executions": 1}})
    sids = [(await secure.call("POST", "/v1/sessions", "a_member", json={}))[1]["id"] for _ in range(2)]
    slow = asyncio.create_task(secure.call("POST", f"/v1/sessions/{sids[0]}/exec", "a_member",
                                           json={"code": "import time\ntime.sleep(1.5)"}))
    await asyncio.sleep(0.5)
    status, body, headers = await secure.call("POST", f"/v1/sessions/{sids[1]}/exec", "a_member",
                                              json={"code": "print(1)"})
    assert status == 429 and body["error"]["code"] == "workspace_busy" and headers["Retry-After"] == "1"
    assert (await slow)[0] == 200


async def test_disk_quota_answers_429(start_secure):
    secure = await start_secure(auth={"quotas": {"disk_bytes": 1000}})
    sid = (await secure.call("POST", "/v1/sessions", "a_member", json={}))[1]["id"]
    status, body, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/big.bin", "a_member", data=b"x" * 2000)
    assert status == 413 and body["error"]["code"] == "quota_exceeded"  # reserved before written: never past
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/big.bin", "a_member", data=b"x" * 1000))[0] == 201
    import asyncio

    await asyncio.sleep(2.1)  # the usage figure is cached for 2 s
    status, body, headers = await secure.call("PUT", f"/v1/sessions/{sid}/files/more.bin", "a_member", data=b"y")
    assert status == 429 and body["error"]["code"] == "workspace_disk_quota" and "Retry-After" in headers


async def test_rate_limit_per_key_answers_429_with_retry_after(start_secure):
    secure = await start_secure(auth={"rate_per_s": 1, "burst": 3})
    statuses = [(await secure.call("GET", "/v1/sessions", "a_member"))[0] for _ in range(4)]
    assert statuses[:3] == [200, 200, 200] and statuses[3] == 429
    status, body, headers = await secure.call("GET", "/v1/sessions", "a_member")
    assert status == 429 and body["error"]["code"] == "rate_limited" and int(headers["Retry-After"]) >= 1
    assert (await secure.call("GET", "/v1/sessions", "b_member"))[0] == 200  # per key


async def test_a_chosen_session_id_taken_by_another_workspace_reveals_nothing(secure):
    status_a, a, _ = await secure.call("POST", "/v1/sessions", "a_member", json={"id": "conversation-1"})
    status_b, b, _ = await secure.call("POST", "/v1/sessions", "b_member", json={"id": "conversation-1"})
    assert status_a == status_b == 201  # no 409 that would tell B the id is in use elsewhere
    assert a["id"] != b["id"] and a["id"].endswith("conversation-1") and b["id"].endswith("conversation-1")
    again, body, _ = await secure.call("POST", "/v1/sessions", "a_member", json={"id": a["id"]})
    assert again == 409 and body["error"]["code"] == "session_exists"  # the caller's own id stays its own
    status, _, _ = await secure.call("GET", f"/v1/sessions/{a['id']}", "b_member")
    assert status == 404
