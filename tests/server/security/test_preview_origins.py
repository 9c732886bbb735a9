"""Previews on origins of their own: never the API's, never reaching past their own host.

A page served by one tenant's process must not get the API's origin (a service worker there
would see every console request and its key), must not set cookies for the API's host, and
must see its own root-absolute paths unchanged (dev servers)."""

from __future__ import annotations

import aiohttp
import pytest
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, devserver, new_session, preview_of
from yarl import URL

from wasm_runner_server.http.preview_server import SANDBOX_CSP

pytestmark = NATIVE_ROOT_SERVICE


@pytest.fixture
async def secure(start_secure):
    return await start_secure(**SECTIONS)


async def test_a_preview_is_served_by_its_own_listener_with_root_paths_unchanged_and_every_answer_sandboxed(
        secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    preview = await preview_of(secure, sid, 8080)
    api = secure.client.make_url("/")
    url = URL(preview.url)
    assert url.host is not None and url.host.endswith(".localhost") and url.host.startswith("8080-")
    assert url.port != api.port and url.path == "/"  # not the API's origin
    async with aiohttp.ClientSession() as http:
        async with http.get(preview.base + "/@vite/client?x=1", headers=preview.headers()) as response:
            assert response.status == 200
            assert (await response.text()).startswith("hello from the sandbox; auth=None; path=/@vite/client?x=1")
            assert response.headers.getall("Content-Security-Policy") == [SANDBOX_CSP]
        async with http.get(preview.base + "/redirect", headers=preview.headers(), allow_redirects=False) as response:
            assert response.status == 302 and response.headers["Location"] == "/chunked"  # the server's own
            assert response.headers["Content-Security-Policy"] == SANDBOX_CSP
        # errors of the listener itself are sandboxed too: an unknown preview address
        unknown = "8080-" + "a" * 26 + url.host[url.host.index("."):] + f":{url.port}"
        async with http.get(preview.base + "/", headers={"Host": unknown}) as response:
            assert response.status == 404 and (await response.json())["error"]["code"] == "preview_not_found"
            assert response.headers["Content-Security-Policy"] == SANDBOX_CSP
        async with http.ws_connect(preview.base + "/ws", headers=preview.headers()) as ws:
            await ws.send_str("ping")
            assert (await ws.receive(timeout=5)).data == "echo: ping"
        # a sandboxed page's module script request (Origin: null) may read the answer
        async with http.get(preview.base + "/main.js", headers=preview.headers(Origin="null")) as response:
            assert response.status == 200 and response.headers["Access-Control-Allow-Origin"] == "*"


async def test_the_api_path_of_a_port_redirects_to_the_preview_origin_and_serves_nothing_of_the_guest(secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    async with secure.client.get(URL(f"/v1/sessions/{sid}/ports/8080/a%20b/c?d=e%26f", encoded=True),
                                 headers=secure.auth("a_member"), allow_redirects=False) as response:
        assert response.status == 307
        target = URL(response.headers["Location"])
        assert "hello from the sandbox" not in await response.text()
    assert target.host is not None and target.host.startswith("8080-")
    assert response.headers["Location"].endswith("/a%20b/c?d=e%26f")  # as sent, nothing decoded
    assert target.port != secure.client.make_url("/").port
    async with aiohttp.ClientSession() as http:
        async with http.get(URL(f"http://127.0.0.1:{target.port}/a%20b/c?d=e%26f", encoded=True),
                            headers={"Host": f"{target.host}:{target.port}"}) as response:
            assert (await response.text()).startswith("hello from the sandbox; auth=None; path=/a%20b/c?d=e%26f")
    # old preview links on the API's origin serve nothing of the guest either
    status, data, _ = await secure.call("GET", f"/v1/preview-links/x/{sid}/8080/")
    assert status == 410 and data["error"]["code"] == "link_invalid"


async def test_another_tenant_gets_no_preview_of_a_session_not_theirs(secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    for method, path in (("POST", f"/v1/sessions/{sid}/ports/8080:presign"), ("GET", f"/v1/sessions/{sid}/ports/8080/")):
        status, data, headers = await secure.call(method, path, "b_member", json={} if method == "POST" else None)
        assert status == 404 and data["error"]["code"] == "session_not_found" and "Location" not in headers
    status, _, _ = await secure.call("GET", f"/v1/sessions/{sid}/ports/8080/")  # no key
    assert status == 401


async def test_a_revoked_key_or_a_deleted_session_ends_the_preview(secure) -> None:
    status, temp, _ = await secure.call("POST", "/v1/admin/keys", "admin",
                                        json={"workspace": "alpha", "name": "temp", "kind": "member"})
    assert status == 201
    secure.keys["temp"] = temp["key"]
    sid = await new_session(secure, id="again")  # a chosen id (tagged with the workspace) can be chosen again
    await devserver(secure, sid, 8080)
    preview = await preview_of(secure, sid, 8080)
    by_temp = await preview_of(secure, sid, 8080, key="temp")
    async with aiohttp.ClientSession() as http:
        for link in (preview, by_temp):
            async with http.get(link.base + "/", headers=link.headers()) as response:
                assert response.status == 200
        status, _, _ = await secure.call("DELETE", f"/v1/admin/keys/{temp['prefix']}", "admin")
        assert status == 200
        async with http.get(by_temp.base + "/", headers=by_temp.headers()) as response:
            assert response.status == 403 and (await response.json())["error"]["code"] == "link_revoked"
        async with http.get(preview.base + "/", headers=preview.headers()) as response:
            assert response.status == 200  # another key's link lives on
        status, _, _ = await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member")
        assert status in (200, 204)
        assert await new_session(secure, id=sid) == sid  # the same id again: not the session of the link
        await devserver(secure, sid, 8080)
        async with http.get(preview.base + "/", headers=preview.headers()) as response:
            assert response.status == 404 and (await response.json())["error"]["code"] == "preview_not_found"


async def test_service_worker_scope_and_cookies_for_other_hosts_are_stripped(secure) -> None:
    sid = await new_session(secure)
    await devserver(secure, sid, 8080)
    preview = await preview_of(secure, sid, 8080)
    own = preview.host.rsplit(":", 1)[0]
    cookies = ["own=1; Path=/", "wide=1; Domain=localhost; Path=/", "dotted=1; domain=.LOCALHOST",
               f"exact=1; Domain={own}", "sibling=1; Domain=8081-" + own.split("-", 1)[1]]
    async with aiohttp.ClientSession() as http:
        async with http.get(preview.base + "/wide-headers",
                            headers=preview.headers(**{"X-Cookies": "|".join(cookies)})) as response:
            assert response.status == 200
            assert "Service-Worker-Allowed" not in response.headers
            assert response.headers.getall("Set-Cookie") == ["own=1; Path=/", f"exact=1; Domain={own}"]
        async with http.get(preview.base + "/", headers=preview.headers(Cookie="own=1")) as response:
            assert (await response.text()).endswith("cookie=own=1")  # the page's own cookies reach its server


async def test_the_api_origin_refuses_service_worker_scripts(secure) -> None:
    for path in ("/console/sw.js", "/v1/sessions", "/healthz"):
        status, data, _ = await secure.call("GET", path, "a_member", headers={"Service-Worker": "script"})
        assert status == 403 and data["error"]["code"] == "service_worker_refused", (path, data)
    status, _, _ = await secure.call("GET", "/v1/sessions", "a_member")
    assert status == 200


async def test_with_a_preview_domain_the_api_listener_answers_its_hosts_with_the_preview_only(start_secure) -> None:
    secure = await start_secure(**SECTIONS, previews={"domain": "preview.test", "scheme": "https"})
    sid = await new_session(secure)
    await devserver(secure, sid, 3000)
    api = secure.client.make_url("")
    preview = await preview_of(secure, sid, 3000, base=str(api).rstrip("/"))
    url = URL(preview.url)
    assert url.scheme == "https" and url.host is not None and url.host.endswith(".preview.test")
    assert url.host.startswith("3000-") and url.path == "/"
    async with aiohttp.ClientSession() as http:
        async with http.get(preview.base + "/v1/sessions", headers=preview.headers(**secure.auth("a_member"))) as page:
            # the API's path on a preview host is the guest's path, and the key never reaches it
            assert (await page.text()).startswith("hello from the sandbox; auth=None; path=/v1/sessions")
        for host in ("3000-" + "b" * 26 + ".preview.test", "preview.test", f"{sid}.preview.test"):
            async with http.get(preview.base + "/v1/sessions",
                                headers={"Host": host, **secure.auth("a_member")}) as response:
                assert response.status == 404 and (await response.json())["error"]["code"] == "preview_not_found"
        async with http.get(preview.base + "/v1/sessions", headers=secure.auth("a_member")) as response:
            assert response.status == 200  # the API on its own host
    status, metrics, _ = await secure.call("GET", "/metrics", "admin")
    assert status == 200 and 'route="preview"' in metrics  # not counted as the API route it resembles
    async with secure.client.get(f"/v1/sessions/{sid}/ports/3000/x", headers=secure.auth("a_member"),
                                 allow_redirects=False) as response:
        location = URL(response.headers["Location"])
        assert response.status == 307 and location.host is not None and location.host.endswith(".preview.test")
