"""Presigned links live only as long as their key and their session, have one spelling, serve one
file as a download (never a listing, never inline HTML), and count against their key's rate limit."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from server_helpers import link_path, raw_url

from wasm_runner_server.security.tenants import TenantStore


async def _session_with(secure, files: dict[str, bytes], key: str = "a_member", **fields) -> str:
    status, data, _ = await secure.call("POST", "/v1/sessions", key, json=fields)
    assert status == 201, data
    sid = data["id"]
    for path, content in files.items():
        assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/{path}?mkdirs=true", key, data=content))[0] in (
            200, 201)
    return sid


async def _link(secure, sid: str, path: str, key: str = "a_member", **body) -> str:
    status, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/{path}:presign", key, json=body)
    assert status == 200, link
    return link_path(link["url"])


async def test_a_link_dies_with_the_key_that_made_it(secure):
    sid = await _session_with(secure, {"report.txt": b"hello"})
    get = await _link(secure, sid, "report.txt")
    put = await _link(secure, sid, "upload.txt", method="PUT")
    another = await _link(secure, sid, "report.txt")  # another link of the same key
    assert (await secure.call("GET", get))[0] == 200
    store = TenantStore.in_data_dir(secure.data_dir)
    assert store.revoke(secure.keys["a_member"][:15]) is not None
    store.close()
    for method, url in (("GET", get), ("PUT", put), ("GET", another)):
        status, body, _ = await secure.call(method, url, data=b"x")
        assert status == 403 and body["error"]["code"] == "link_revoked", (method, body)
        assert "request a new link" in body["error"]["hint"]


async def test_a_link_does_not_outlive_its_key_but_other_keys_links_live_on(start_secure, tmp_path):
    secure = await start_secure()
    store = TenantStore.in_data_dir(secure.data_dir)
    second, _ = store.create_key("alpha", "second", "member")
    store.close()
    secure.keys["a_second"] = second
    sid = await _session_with(secure, {"report.txt": b"hello"})
    mine, theirs = await _link(secure, sid, "report.txt"), await _link(secure, sid, "report.txt", "a_second")
    store = TenantStore.in_data_dir(secure.data_dir)
    store.revoke(second[:15])
    store.close()
    assert (await secure.call("GET", theirs))[0] == 403
    assert (await secure.call("GET", mine))[1] == "hello"


async def test_a_link_is_not_honoured_by_a_session_created_again_under_the_same_id(secure):
    sid = await _session_with(secure, {"report.txt": b"first life"}, id="reborn")
    old = await _link(secure, sid, "report.txt")
    old_put = await _link(secure, sid, "report.txt", method="PUT")
    assert (await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member"))[0] == 204
    again = await _session_with(secure, {"report.txt": b"second life"}, id=sid)
    assert again == sid
    for method, url in (("GET", old), ("PUT", old_put)):
        status, body, _ = await secure.call(method, url, data=b"overwrite")
        assert status == 403 and body["error"]["code"] == "link_invalid", body
    assert (await secure.call("GET", f"/v1/sessions/{sid}/files/report.txt", "a_member"))[1] == "second life"
    assert (await secure.call("GET", await _link(secure, sid, "report.txt")))[1] == "second life"


async def test_a_link_has_exactly_one_spelling(secure):
    sid = await _session_with(secure, {"out/report.txt": b"hello"})
    url = await _link(secure, sid, "out/report.txt")
    assert (await secure.call("GET", url))[0] == 200
    token = url.split("/")[3]
    expires, key_id, kid, sig = token.split(".")
    fullwidth = quote(chr(0xFF10 + int(expires[0])))  # int() reads a fullwidth digit as the digit
    variants = [
        f"0{expires}.{key_id}.{kid}.{sig}", f"%2B{expires}.{key_id}.{kid}.{sig}",
        f"%20{expires}.{key_id}.{kid}.{sig}", f"{expires[:3]}_{expires[3:]}.{key_id}.{kid}.{sig}",
        f"{fullwidth}{expires[1:]}.{key_id}.{kid}.{sig}",
        f"{expires}.{key_id}.{kid}.{sig}.", f"{expires}..{key_id}.{kid}.{sig}",
    ]
    # Another case is another spelling only where there is a letter (an id may be all digits).
    variants += [f"{expires}.{key_id}.{kid}.{sig.upper()}"] * (sig.upper() != sig)
    variants += [f"{expires}.{key_id}.{kid.upper()}.{sig}"] * (kid.upper() != kid)
    for variant in variants:
        status, body, _ = await secure.call("GET", url.replace(token, variant))
        assert status == 403 and body["error"]["code"] == "link_invalid", variant
    base = url.rsplit("/out/report.txt", 1)[0]
    for path in ("/out//report.txt", "/out/./report.txt", "/./out/report.txt", "/out/report.txt?x=1",
                 "/out/report.txt/"):
        async with secure.client.session.get(raw_url(secure.client, base + path)) as response:
            assert response.status == 403, path
            assert (await response.json())["error"]["code"] == "link_invalid"


async def test_a_link_serves_one_file_never_a_listing(secure):
    sid = await _session_with(secure, {"out/a.txt": b"a", "out/secret-name.txt": b"b"})
    url = await _link(secure, sid, "out")
    status, body, _ = await secure.call("GET", url)
    assert status == 409 and body["error"]["code"] == "not_a_file"
    assert "secret-name" not in str(body)


@pytest.mark.parametrize("via", ["link", "api"])
async def test_downloads_are_attachments_never_sniffed_or_rendered(secure, via):
    html = b"<html><script>alert(document.domain)</script></html>"
    sid = await _session_with(secure, {"page.html": html})
    if via == "link":
        status, body, headers = await secure.call("GET", await _link(secure, sid, "page.html"))
    else:
        status, body, headers = await secure.call("GET", f"/v1/sessions/{sid}/files/page.html", "a_member")
    assert status == 200 and body.encode() == html
    assert headers["Content-Disposition"] == 'attachment; filename="page.html"'
    assert headers["X-Content-Type-Options"] == "nosniff"


async def test_links_count_against_their_keys_rate_limit(start_secure):
    secure = await start_secure(auth={"rate_per_s": 0.01, "burst": 6})
    sid = await _session_with(secure, {"report.txt": b"hello"})  # 2 requests of the burst
    url = await _link(secure, sid, "report.txt")  # 3
    statuses = [(await secure.call("GET", url))[0] for _ in range(5)]
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429]
    status, body, headers = await secure.call("GET", url)
    assert status == 429 and body["error"]["code"] == "rate_limited" and int(headers["Retry-After"]) >= 1
    assert (await secure.call("GET", f"/v1/sessions/{sid}", "a_member"))[0] == 429  # the key's own bucket
    assert (await secure.call("GET", f"/v1/sessions/{sid}", "b_member"))[0] == 404  # another key's is untouched
