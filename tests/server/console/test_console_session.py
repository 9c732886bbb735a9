"""The console's sign-in exchange: a key for an HttpOnly, SameSite=Strict cookie and a CSRF token. The
cookie works only on the routes the console calls and only with the token (reads too: other pages of
the origin get the cookie attached but never the token), sign-out ends it, and Bearer callers are
unaffected. Cookies are sent by hand (the test client keeps none for
an IP address), as a browser would send them."""

from __future__ import annotations

import time
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from server_helpers import body

from wasm_runner_server.http.paths import CONSOLE_LINKS_PATH, CONSOLE_SESSION_PATH
from wasm_runner_server.http.policy import Principal
from wasm_runner_server.http.routes.ports import sets_console_cookie, without_console_cookie
from wasm_runner_server.security import console_sessions
from wasm_runner_server.security.console_sessions import ConsoleSessions
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.security.tenants import TenantStore

SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


def make_key(data_dir: Path, workspace: str = "alpha", kind: str = "member") -> tuple[str, str]:
    store = TenantStore.in_data_dir(data_dir)
    try:
        key, record = store.create_key(workspace, "console", kind)
        return key, record.id
    finally:
        store.close()


async def sign_in(client: TestClient, key: str, **headers: str) -> tuple[int, Any, SimpleCookie]:
    async with client.post(CONSOLE_SESSION_PATH, json={"key": key}, headers={**SAME_ORIGIN, **headers}) as response:
        jar: SimpleCookie = SimpleCookie()
        for value in response.headers.getall("Set-Cookie", []):
            jar.load(value)
        client.session.cookie_jar.clear()  # each test sends the cookie itself, exactly as a browser would
        return response.status, (await body(response)) | {"_headers": dict(response.headers)}, jar


async def send(client: TestClient, method: str, path: str, cookie: str | None, csrf: str | None = None,
               **kwargs: Any) -> tuple[int, Any]:
    headers = dict(kwargs.pop("headers", {}))
    if cookie is not None:
        headers["Cookie"] = f"wr_console={cookie}"
    if csrf is not None:
        headers["X-CSRF-Token"] = csrf
    async with client.request(method, path, headers=headers, **kwargs) as response:
        return response.status, await body(response)


@pytest.fixture
async def keyed(serve, tmp_path):
    key, key_id = make_key(tmp_path / "data")
    client = await serve(auth={"enabled": True})
    return client, key, key_id


async def test_sign_in_sets_an_httponly_strict_cookie_scoped_to_the_api_and_clears_site_data(keyed):
    client, key, _ = keyed
    status, state, jar = await sign_in(client, key)
    assert status == 200, state
    cookie = jar["wr_console"]
    assert cookie["httponly"] is True and cookie["samesite"] == "Strict" and cookie["path"] == "/v1/"
    assert not cookie["secure"]  # plain http here; over https it is Secure
    assert 0 < int(cookie["max-age"]) <= 8 * 3600
    assert key not in cookie.value and key not in str(state)
    assert state["workspace"] == "alpha" and len(state["csrf_token"]) >= 32
    assert state["_headers"]["Clear-Site-Data"] == '"cache", "storage"'
    assert (await send(client, "GET", "/v1/sessions", cookie.value, state["csrf_token"]))[0] == 200
    # the token is answered once: no route gives it out again to a page holding only the cookie
    assert (await send(client, "GET", CONSOLE_SESSION_PATH, cookie.value))[0] == 405


async def test_a_wrong_key_a_form_post_and_a_cross_site_sign_in_are_refused(keyed):
    client, key, _ = keyed
    status, data, jar = await sign_in(client, key[:-2] + "xx")
    assert status == 401 and data["error"]["code"] == "invalid_key" and "wr_console" not in jar
    status, data, jar = await sign_in(client, key, **{"Sec-Fetch-Site": "cross-site"})
    assert status == 403 and data["error"]["code"] == "csrf_refused" and "wr_console" not in jar
    status, data, jar = await sign_in(client, key, Origin="http://evil.example")
    assert status == 403 and "wr_console" not in jar
    status, data, jar = await sign_in(client, key, Origin=f"http://{client.host}:{client.port + 1}")
    assert status == 403 and "wr_console" not in jar
    async with client.post(CONSOLE_SESSION_PATH, data=f'{{"key": "{key}"}}', headers={"Content-Type": "text/plain"}) as r:
        assert r.status == 415 and "Set-Cookie" not in r.headers


async def test_the_cookie_is_secure_when_the_browser_came_over_https_through_a_proxy(keyed):
    client, key, _ = keyed
    host = f"{client.host}:{client.port}"
    status, _, jar = await sign_in(client, key, Origin=f"https://{host}")  # TLS ended before the service
    assert status == 200 and jar["wr_console"]["secure"] is True


async def test_the_cookie_reads_and_writes_on_the_console_routes_only_with_its_csrf_token(keyed):
    client, key, _ = keyed
    _, state, jar = await sign_in(client, key)
    cookie, csrf = jar["wr_console"].value, state["csrf_token"]
    status, created = await send(client, "POST", "/v1/sessions", cookie, csrf, json={})
    assert status == 201, created
    sid = created["id"]
    status, _ = await send(client, "PUT", f"/v1/sessions/{sid}/files/a.txt", cookie, csrf, data=b"hello")
    assert status in (200, 201)
    status, listing = await send(client, "GET", f"/v1/sessions/{sid}/files", cookie, csrf)
    assert status == 200 and [e["path"] for e in listing["entries"]] == ["a.txt"]
    # calls without the token, or with another one, are refused: changes and reads alike
    for csrf_sent in (None, "x" * len(csrf)):
        for path in ("/v1/sessions", f"/v1/sessions/{sid}/files", f"/v1/sessions/{sid}/files/a.txt"):
            status, data = await send(client, "GET", path, cookie, csrf_sent)
            assert status == 403 and data["error"]["code"] == "csrf_refused", (path, data)
        status, data = await send(client, "PUT", f"/v1/sessions/{sid}/files/a.txt", cookie, csrf_sent, data=b"evil")
        assert status == 403 and data["error"]["code"] == "csrf_refused", data
        status, data = await send(client, "POST", "/v1/sessions", cookie, csrf_sent, json={})
        assert status == 403
        status, data = await send(client, "DELETE", f"/v1/sessions/{sid}/files/a.txt", cookie, csrf_sent)
        assert status == 403
    async with client.get(f"/v1/sessions/{sid}/files/a.txt", headers={"Cookie": f"wr_console={cookie}",
                                                                       "X-CSRF-Token": csrf}) as r:
        assert await r.read() == b"hello"


async def test_the_cookie_is_refused_off_the_console_routes_and_when_planted_twice(keyed):
    client, key, _ = keyed
    _, state, jar = await sign_in(client, key)
    cookie, csrf = jar["wr_console"].value, state["csrf_token"]
    status, created = await send(client, "POST", "/v1/sessions", cookie, csrf, json={})
    sid = created["id"]
    for method, path in [("GET", "/v1/audit"), ("GET", f"/v1/sessions/{sid}/ports/8000/"),
                         ("GET", f"/v1/sessions/{sid}/ports/8000"), ("GET", "/v1/shared/files"),
                         ("POST", "/v1/exec"), ("GET", "/v1/admin/keys"), ("GET", "/v1/profiles")]:
        status, data = await send(client, method, path, cookie, csrf, json={} if method == "POST" else None)
        assert status == 401, (method, path, data)
    # the session page's own calls (its state, network switch, delete) take the cookie, with the token only
    for method, path in [("GET", f"/v1/sessions/{sid}"), ("PATCH", f"/v1/sessions/{sid}"),
                         ("DELETE", f"/v1/sessions/{sid}"), ("GET", f"/v1/sessions/{sid}/processes")]:
        status, data = await send(client, method, path, cookie, json={"egress": None} if method == "PATCH" else None)
        assert status == 403 and data["error"]["code"] == "csrf_refused", (method, path, data)
    assert (await send(client, "GET", f"/v1/sessions/{sid}", cookie, csrf))[0] == 200
    assert (await send(client, "DELETE", f"/v1/sessions/{sid}", cookie, csrf))[0] == 204
    # a second cookie of the same name (planted by a script under a longer path) voids both
    headers = {"Cookie": f"wr_console=planted; wr_console={cookie}", "X-CSRF-Token": csrf}
    async with client.get("/v1/sessions", headers=headers) as response:
        assert response.status == 401


async def test_bearer_callers_are_unaffected_and_win_over_a_cookie(keyed, tmp_path):
    client, key, _ = keyed
    other, _ = make_key(tmp_path / "data", workspace="beta")
    _, state, jar = await sign_in(client, key)
    bearer = {"Authorization": f"Bearer {other}"}
    status, created = await send(client, "POST", "/v1/sessions", None, json={}, headers=bearer)  # no CSRF token
    assert status == 201
    status, listing = await send(client, "GET", "/v1/sessions", jar["wr_console"].value, state["csrf_token"],
                                 headers=bearer)
    assert status == 200 and [s["id"] for s in listing["sessions"]] == [created["id"]]  # beta's, not alpha's


async def test_sign_out_ends_the_session_and_clears_the_cookie(keyed):
    client, key, _ = keyed
    _, state, jar = await sign_in(client, key)
    cookie, csrf = jar["wr_console"].value, state["csrf_token"]
    status, data = await send(client, "DELETE", CONSOLE_SESSION_PATH, cookie)
    assert status == 403 and data["error"]["code"] == "csrf_refused"  # sign-out is a state change too
    async with client.delete(CONSOLE_SESSION_PATH, headers={"Cookie": f"wr_console={cookie}", "X-CSRF-Token": csrf,
                                                             **SAME_ORIGIN}) as response:
        assert response.status == 204
        cleared: SimpleCookie = SimpleCookie()
        cleared.load(response.headers["Set-Cookie"])
        assert cleared["wr_console"].value == "" and cleared["wr_console"]["path"] == "/v1/"
    client.session.cookie_jar.clear()
    assert (await send(client, "GET", "/v1/sessions", cookie, csrf))[0] == 401  # the old cookie is dead server-side


async def test_a_console_session_dies_with_its_key(keyed):
    client, key, key_id = keyed
    _, state, jar = await sign_in(client, key)
    cookie, csrf = jar["wr_console"].value, state["csrf_token"]
    assert (await send(client, "GET", "/v1/sessions", cookie, csrf))[0] == 200
    client.app[SECURITY].tenants.revoke(key_id)
    assert (await send(client, "GET", "/v1/sessions", cookie, csrf))[0] == 401


def test_a_console_session_expires(monkeypatch):
    sessions = ConsoleSessions(lifetime_s=60)
    session_id, _ = sessions.open(Principal("alpha", "k1", "member"))
    assert sessions.get(session_id) is not None
    later = time.time() + 61
    monkeypatch.setattr(console_sessions.time, "time", lambda: later)
    assert sessions.get(session_id) is None


def test_one_keys_sign_ins_push_out_only_its_own_oldest_sessions():
    sessions = ConsoleSessions(lifetime_s=60)
    other, _ = sessions.open(Principal("beta", "k2", "member"))
    first, _ = sessions.open(Principal("alpha", "k1", "member"))
    for _ in range(console_sessions.MAX_PER_KEY):
        latest, _ = sessions.open(Principal("alpha", "k1", "member"))
    assert sessions.get(first) is None and sessions.get(latest) is not None and sessions.get(other) is not None


def test_the_preview_proxy_never_passes_the_console_cookie_either_way():
    assert without_console_cookie("a=1; wr_console=secret; b=2") == "a=1; b=2"
    assert without_console_cookie("wr_console=secret") == ""
    assert without_console_cookie("xwr_console=1") == "xwr_console=1"
    assert sets_console_cookie("wr_console=fixed; Path=/v1/") and not sets_console_cookie("app=1; Path=/")


async def test_a_sign_in_link_signs_the_console_in_once_as_its_key_and_never_for_another(keyed, tmp_path):
    client, key, key_id = keyed
    async with client.post(CONSOLE_LINKS_PATH, headers={"Authorization": f"Bearer {key}"}) as response:
        assert response.status == 201, await response.text()
        made = await response.json()
    url = made["url"]
    assert url.startswith("http://") and "/console/#sign-in=" in url and key not in url
    assert made["expires_at"] - time.time() <= console_sessions.LINK_S
    token = url.split("#sign-in=", 1)[1]
    async with client.post(CONSOLE_SESSION_PATH, json={"link": token}, headers=SAME_ORIGIN) as response:
        assert response.status == 200, await response.text()
        state = await response.json()
        cookie = response.cookies["wr_console"].value
    client.session.cookie_jar.clear()
    assert state["workspace"] == "alpha"
    assert (await send(client, "GET", "/v1/sessions", cookie, state["csrf_token"]))[0] == 200
    async with client.post(CONSOLE_SESSION_PATH, json={"link": token}, headers=SAME_ORIGIN) as response:
        assert response.status == 401 and (await response.json())["error"]["code"] == "link_invalid"  # once
    # no key, no link; a link whose key was revoked signs nothing in
    async with client.post(CONSOLE_LINKS_PATH) as response:
        assert response.status == 401
    async with client.post(CONSOLE_LINKS_PATH, headers={"Authorization": f"Bearer {key}"}) as response:
        second = (await response.json())["url"].split("#sign-in=", 1)[1]
    client.app[SECURITY].tenants.revoke(key_id)
    async with client.post(CONSOLE_SESSION_PATH, json={"link": second}, headers=SAME_ORIGIN) as response:
        assert response.status == 401


def test_sign_in_links_expire_and_one_key_keeps_a_few(monkeypatch):
    sessions = ConsoleSessions(lifetime_s=60)
    alpha = Principal("alpha", "k1", "member")
    tokens = [sessions.link(alpha)[0] for _ in range(console_sessions.MAX_LINKS_PER_KEY + 1)]
    assert sessions.redeem(tokens[0]) is None  # pushed out by the newest
    assert sessions.redeem(tokens[-1]) == alpha
    token, expires = sessions.link(alpha)
    assert sessions.redeem("x" + token) is None
    monkeypatch.setattr(console_sessions.time, "time", lambda: expires + 1)
    assert sessions.redeem(token) is None
