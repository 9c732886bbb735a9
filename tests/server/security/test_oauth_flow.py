"""OAuth 2.0 end to end, as an app and a member's browser do it, against a real service on 127.0.0.1: the
app is Authlib's own httpx client (authorization URL with PKCE, token, refresh, revocation); the browser
signs in to the console with a member key and approves or denies on the consent page."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import httpx
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError
from oauth_flow import (
    ALL,
    REDIRECT,
    Browser,
    Service,
    app_client,
    authorize,
    call,
    get_tokens,
    register,
    start_service,
)


@pytest_asyncio.fixture
async def start(tmp_path: Path) -> AsyncIterator:
    servers: list[TestServer] = []

    async def go(**oauth: float) -> Service:
        return await start_service(tmp_path / f"s{len(servers)}", servers, **oauth)

    yield go
    for server in servers:
        await server.close()


@pytest_asyncio.fixture
async def service(start) -> Service:
    return await start()


@pytest_asyncio.fixture
async def browser(service: Service) -> AsyncIterator[Browser]:
    b = Browser(service)
    await b.sign_in(service.keys["alice"])
    yield b
    await b.close()


async def test_authorization_code_with_pkce_acts_as_the_member_in_their_workspace(service, browser):
    client, token = await get_tokens(service, browser)
    assert token["access_token"].startswith("wro_") and token["refresh_token"].startswith("wrr_")
    assert token["expires_in"] == 3600 and set(token["scope"].split()) == set(ALL.split())
    me = (await call(service, "GET", "/v1/me", token["access_token"])).json()
    assert me["workspace"] == "alpha" and me["member"] == "alice" and me["kind"] == "member"
    assert me["key_prefix"].startswith("oauth:")
    created = await call(service, "POST", "/v1/sessions", token["access_token"], json={})
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    put = await call(service, "PUT", f"/v1/sessions/{sid}/files/notes.txt", token["access_token"], content=b"hi")
    assert put.status_code in (200, 201), put.text
    # the member's own key sees the session the app made for them: the same workspace
    async with httpx.AsyncClient() as http:
        read = await http.get(f"{service.base}/v1/sessions/{sid}/files/notes.txt", headers=service.auth("alice"))
    assert read.content == b"hi"
    # the audit row names the grant
    async with httpx.AsyncClient() as http:
        audit = (await http.get(f"{service.base}/v1/audit", headers=service.auth("alice"))).json()
    assert any(row.get("key_id", "").startswith("oauth:") for row in audit["entries"]), audit
    await client.aclose()


async def test_a_wrong_pkce_verifier_is_refused(service, browser):
    client = app_client(service, await register(service), ALL)
    location = await authorize(service, browser, client, generate_token(48))
    with pytest.raises(OAuthError) as refused:
        await client.fetch_token(f"{service.base}/oauth/token", authorization_response=location,
                                 code_verifier=generate_token(48))
    assert refused.value.error == "invalid_grant"
    await client.aclose()


async def test_a_public_app_without_pkce_gets_no_code(service, browser):
    app = await register(service)
    url = (f"{service.base}/oauth/authorize?response_type=code&client_id={app['client_id']}"
           f"&redirect_uri={REDIRECT}&scope=exec&state=s1")
    status, _, location = await browser.open(url)
    assert status == 302 and location is not None
    assert parse_qs(urlsplit(location).query)["error"] == ["invalid_request"]


async def test_refresh_rotates_the_refresh_token_and_spends_the_old_one(service, browser):
    client, first = await get_tokens(service, browser)
    second = await client.refresh_token(f"{service.base}/oauth/token", refresh_token=first["refresh_token"])
    assert second["refresh_token"] != first["refresh_token"] and second["access_token"] != first["access_token"]
    assert (await call(service, "GET", "/v1/me", second["access_token"])).status_code == 200
    assert (await call(service, "GET", "/v1/me", first["access_token"])).status_code == 401
    third = await client.refresh_token(f"{service.base}/oauth/token", refresh_token=second["refresh_token"])
    assert (await call(service, "GET", "/v1/me", third["access_token"])).status_code == 200
    await client.aclose()


async def test_reusing_a_rotated_refresh_token_revokes_the_whole_chain(service, browser):
    client, first = await get_tokens(service, browser)
    second = await client.refresh_token(f"{service.base}/oauth/token", refresh_token=first["refresh_token"])
    with pytest.raises(OAuthError) as refused:  # the old refresh token, used again (stolen, say)
        await client.refresh_token(f"{service.base}/oauth/token", refresh_token=first["refresh_token"])
    assert refused.value.error == "invalid_grant"
    newest = await call(service, "GET", "/v1/me", second["access_token"])
    assert newest.status_code == 401 and 'error="invalid_token"' in newest.headers["WWW-Authenticate"]
    with pytest.raises(OAuthError):
        await client.refresh_token(f"{service.base}/oauth/token", refresh_token=second["refresh_token"])
    await client.aclose()


async def test_an_access_token_expires(start):
    service = await start(access_token_s=1)
    browser = Browser(service)
    await browser.sign_in(service.keys["alice"])
    client, token = await get_tokens(service, browser)
    assert token["expires_in"] == 1
    assert (await call(service, "GET", "/v1/me", token["access_token"])).status_code == 200
    deadline = time.monotonic() + 10
    while (status := (await call(service, "GET", "/v1/me", token["access_token"])).status_code) == 200:
        assert time.monotonic() < deadline, "the token did not expire"
        await asyncio.sleep(0.1)
    assert status == 401
    fresh = await client.refresh_token(f"{service.base}/oauth/token", refresh_token=token["refresh_token"])
    assert (await call(service, "GET", "/v1/me", fresh["access_token"])).status_code == 200
    await client.aclose()
    await browser.close()


async def test_revoking_tokens(service, browser):
    client, token = await get_tokens(service, browser)
    await client.revoke_token(f"{service.base}/oauth/revoke", token=token["access_token"],
                              token_type_hint="access_token")
    assert (await call(service, "GET", "/v1/me", token["access_token"])).status_code == 401
    fresh = await client.refresh_token(f"{service.base}/oauth/token", refresh_token=token["refresh_token"])
    assert (await call(service, "GET", "/v1/me", fresh["access_token"])).status_code == 200
    await client.revoke_token(f"{service.base}/oauth/revoke", token=fresh["refresh_token"],
                              token_type_hint="refresh_token")  # the grant ends: its access token too
    assert (await call(service, "GET", "/v1/me", fresh["access_token"])).status_code == 401
    with pytest.raises(OAuthError):
        await client.refresh_token(f"{service.base}/oauth/token", refresh_token=fresh["refresh_token"])
    await client.aclose()


async def test_a_files_read_token_cannot_exec_nor_reach_admin_routes(service, browser):
    async with httpx.AsyncClient() as http:
        sid = (await http.post(f"{service.base}/v1/sessions", headers=service.auth("alice"), json={})).json()["id"]
        await http.put(f"{service.base}/v1/sessions/{sid}/files/a.txt", headers=service.auth("alice"), content=b"x")
    client, token = await get_tokens(service, browser, "files:read")
    assert token["scope"] == "files:read"
    read = await call(service, "GET", f"/v1/sessions/{sid}/files/a.txt", token["access_token"])
    assert read.status_code == 200 and read.content == b"x"
    for method, path, kwargs in [("POST", f"/v1/sessions/{sid}/exec", {"json": {"code": "print(1)"}}),
                                 ("PUT", f"/v1/sessions/{sid}/files/b.txt", {"content": b"y"}),
                                 ("POST", "/v1/sessions", {"json": {}}),
                                 ("GET", "/v1/admin/keys", {}), ("GET", "/v1/audit", {}),
                                 ("GET", "/v1/oauth/grants", {})]:
        refused = await call(service, method, path, token["access_token"], **kwargs)
        assert refused.status_code == 403, (method, path, refused.text)
        assert refused.json()["error"]["code"] == "insufficient_scope"
        assert 'error="insufficient_scope"' in refused.headers["WWW-Authenticate"]
    await client.aclose()


async def test_another_workspaces_session_is_a_404_like_a_missing_one(service, browser):
    async with httpx.AsyncClient() as http:
        theirs = (await http.post(f"{service.base}/v1/sessions", headers=service.auth("bob"), json={})).json()["id"]
    client, token = await get_tokens(service, browser)
    other = await call(service, "GET", f"/v1/sessions/{theirs}/files", token["access_token"])
    missing = await call(service, "GET", f"/v1/sessions/{'0' * 32}/files", token["access_token"])
    assert other.status_code == missing.status_code == 404
    assert other.json()["error"]["code"] == missing.json()["error"]["code"] == "session_not_found"
    listed = (await call(service, "GET", "/v1/sessions", token["access_token"])).json()
    assert theirs not in {s["id"] for s in listed["sessions"]}
    await client.aclose()


async def test_a_member_who_denies_sends_the_app_access_denied(service, browser):
    client = app_client(service, await register(service), ALL)
    url, _ = client.create_authorization_url(f"{service.base}/oauth/authorize", code_verifier=generate_token(48))
    status, page, _ = await browser.open(url)
    assert status == 200
    status, location = await browser.decide(url, page, "deny")
    assert status == 302 and location is not None and location.startswith(REDIRECT)
    query = parse_qs(urlsplit(location).query)
    assert query["error"] == ["access_denied"] and "code" not in query
    await client.aclose()


async def test_consent_is_recorded_and_a_request_within_it_skips_the_page(service, browser):
    app = await register(service)
    first, _ = await get_tokens(service, browser, "files:read", app=app)
    again = app_client(service, app, "files:read")
    url, _ = again.create_authorization_url(f"{service.base}/oauth/authorize", code_verifier=generate_token(48))
    status, _, location = await browser.open(url)
    assert status == 302 and "code=" in (location or "")  # no page: within what alice gave
    more = app_client(service, app, "files:read exec")
    url, _ = more.create_authorization_url(f"{service.base}/oauth/authorize", code_verifier=generate_token(48))
    status, page, _ = await browser.open(url)
    assert status == 200 and "exec" in page  # more than she gave: asked again
    forced, _ = again.create_authorization_url(f"{service.base}/oauth/authorize", code_verifier=generate_token(48),
                                               prompt="consent")
    assert (await browser.open(forced))[0] == 200
    for c in (first, again, more):
        await c.aclose()


async def test_the_consent_form_needs_its_token_and_a_signed_in_member(service, browser):
    client = app_client(service, await register(service), ALL)
    url, _ = client.create_authorization_url(f"{service.base}/oauth/authorize", code_verifier=generate_token(48))
    status, page, _ = await browser.open(url)
    forged = re.sub(r'(name=csrf_token value=")[^"]+', r"\1forged", page)
    assert (await browser.decide(url, forged, "approve"))[0] == 403
    async with aiohttp.ClientSession() as stranger:  # no console sign-in
        async with stranger.get(url, allow_redirects=False) as response:
            assert response.status == 401
    app_browser = Browser(service)
    await app_browser.sign_in(service.keys["app_key"])  # an app key acts for no member
    assert (await app_browser.open(url))[0] == 403
    await app_browser.close()
    await client.aclose()


async def test_a_member_lists_and_revokes_their_grants(service, browser):
    client, token = await get_tokens(service, browser)
    async with httpx.AsyncClient() as http:
        grants = (await http.get(f"{service.base}/v1/oauth/grants", headers=service.auth("alice"))).json()["grants"]
        assert [g["app"] for g in grants] == ["Notebook app"]
        grant_id = grants[0]["id"]
        by_bob = await http.delete(f"{service.base}/v1/oauth/grants/{grant_id}", headers=service.auth("bob"))
        assert by_bob.status_code == 404
        assert (await call(service, "GET", "/v1/me", token["access_token"])).status_code == 200
        revoked = await http.delete(f"{service.base}/v1/oauth/grants/{grant_id}", headers=service.auth("alice"))
        assert revoked.status_code == 200
        assert (await http.get(f"{service.base}/v1/oauth/grants", headers=service.auth("alice"))).json()["grants"] == []
    assert (await call(service, "GET", "/v1/me", token["access_token"])).status_code == 401
    await client.aclose()


async def test_a_confidential_app_authenticates_with_its_secret(service, browser):
    app = await register(service, public=False)
    assert app["client_secret"].startswith("wrcs_")
    client, token = await get_tokens(service, browser, "sessions:read", app=app)
    assert (await call(service, "GET", "/v1/sessions", token["access_token"])).status_code == 200
    wrong = AsyncOAuth2Client(app["client_id"], "wrcs_wrong", token_endpoint_auth_method="client_secret_basic")
    with pytest.raises(OAuthError) as refused:
        await wrong.refresh_token(f"{service.base}/oauth/token", refresh_token=token["refresh_token"])
    assert refused.value.error == "invalid_client"
    await wrong.aclose()
    await client.aclose()


async def test_deleting_the_app_ends_its_tokens(service, browser):
    app = await register(service)
    client, token = await get_tokens(service, browser, app=app)
    async with httpx.AsyncClient() as http:
        listed = (await http.get(f"{service.base}/v1/admin/oauth/clients", headers=service.auth("admin"))).json()
        assert [c["client_id"] for c in listed["clients"]] == [app["client_id"]]
        assert "client_secret" not in listed["clients"][0]
        deleted = await http.delete(f"{service.base}/v1/admin/oauth/clients/{app['client_id']}",
                                    headers=service.auth("admin"))
        assert deleted.status_code == 200
    assert (await call(service, "GET", "/v1/me", token["access_token"])).status_code == 401
    await client.aclose()


async def test_revoking_the_members_sign_in_key_ends_the_apps_access(service, browser):
    client, token = await get_tokens(service, browser)
    async with httpx.AsyncClient() as http:
        keys = (await http.get(f"{service.base}/v1/admin/keys", headers=service.auth("admin"))).json()["keys"]
        alice = next(k for k in keys if k["name"] == "alice")
        revoked = await http.delete(f"{service.base}/v1/admin/keys/{alice['prefix']}", headers=service.auth("admin"))
        assert revoked.status_code == 200
    assert (await call(service, "GET", "/v1/me", token["access_token"])).status_code == 401
    with pytest.raises(OAuthError) as refused:  # nor can the app refresh its way back in
        await client.refresh_token(f"{service.base}/oauth/token", refresh_token=token["refresh_token"])
    assert refused.value.error == "invalid_grant"
    await client.aclose()


async def test_oauth_over_plain_http_off_loopback_is_refused_with_a_reason(service):
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{service.base}/oauth/token", headers={"Host": "oauth.example.com"},
                                   data={"grant_type": "refresh_token", "refresh_token": "wrr_x", "client_id": "c"})
    assert response.status_code == 400 and "https" in response.json()["error"]["message"]


async def test_a_code_is_good_once_and_its_reuse_revokes_what_it_made(service, browser):
    client = app_client(service, await register(service), ALL)
    verifier = generate_token(48)
    location = await authorize(service, browser, client, verifier)
    token = await client.fetch_token(f"{service.base}/oauth/token", authorization_response=location,
                                     code_verifier=verifier)
    with pytest.raises(OAuthError) as refused:
        await client.fetch_token(f"{service.base}/oauth/token", authorization_response=location,
                                 code_verifier=verifier)
    assert refused.value.error == "invalid_grant"
    assert (await call(service, "GET", "/v1/me", token["access_token"])).status_code == 401
    await client.aclose()


async def test_a_token_on_an_unknown_path_gets_the_404(service, browser):
    client, token = await get_tokens(service, browser, "files:read")
    assert (await call(service, "GET", "/v1/no-such-route", token["access_token"])).status_code == 404
    await client.aclose()
