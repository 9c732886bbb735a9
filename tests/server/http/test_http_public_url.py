"""Links the service hands out are absolute: on `[server] public_url` when set, else on the
request's own scheme and host; a proxy's X-Forwarded-Proto/Host count only when the operator
trusts them, and a forwarded value that is not a host is ignored."""

from __future__ import annotations

import aiohttp
import pytest
from pydantic import ValidationError
from server_helpers import make_config, new_session
from yarl import URL


async def presign(client, sid: str, path: str = "a.txt", **headers: str) -> dict:
    async with client.post(f"/v1/sessions/{sid}/files/{path}:presign", json={}, headers=headers) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_links_and_locations_name_the_host_the_caller_used_and_lead_there(client) -> None:
    own = f"http://127.0.0.1:{client.port}"
    async with client.post("/v1/sessions", json={}) as response:
        assert response.status == 201
        sid = (await response.json())["id"]
        assert response.headers["Location"] == f"{own}/v1/sessions/{sid}"
    async with client.put(f"/v1/sessions/{sid}/files/a.txt", data="hello") as response:
        assert response.status in (200, 201)
    link = await presign(client, sid)
    assert link["url"].startswith(f"{own}/v1/links/")
    async with aiohttp.ClientSession() as browser, browser.get(link["url"]) as response:  # no key, as given
        assert response.status == 200 and await response.text() == "hello"
    async with client.post(f"/v1/sessions/{sid}/pty:presign", json={}) as response:
        terminal = await response.json()
    assert terminal["url"].startswith(f"ws://127.0.0.1:{client.port}/v1/pty-links/")


async def test_public_url_is_the_base_of_every_link(serve) -> None:
    client = await serve(server={"public_url": "https://sandbox.example.com/wasm-runner/"})
    async with client.post("/v1/sessions", json={}) as response:
        sid = (await response.json())["id"]
        assert response.headers["Location"] == f"https://sandbox.example.com/wasm-runner/v1/sessions/{sid}"
    link = await presign(client, sid, **{"X-Forwarded-Host": "elsewhere.example"})
    assert link["url"].startswith("https://sandbox.example.com/wasm-runner/v1/links/")
    async with client.post(f"/v1/sessions/{sid}/pty:presign", json={}) as response:
        assert (await response.json())["url"].startswith("wss://sandbox.example.com/wasm-runner/v1/pty-links/")


async def test_forwarded_headers_count_only_when_trusted_and_only_as_a_scheme_and_a_host(serve, tmp_path) -> None:
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com"}
    untrusting = await serve()
    sid = await new_session(untrusting)
    assert URL((await presign(untrusting, sid, **forwarded))["url"]).host == "127.0.0.1"

    trusting = await serve(data_dir=tmp_path / "trusting", server={"trust_forwarded": True})
    sid = await new_session(trusting)
    assert (await presign(trusting, sid, **forwarded))["url"].startswith("https://api.example.com/v1/links/")
    for host in ("evil.example/phish?", "user@evil.example", "evil.example#", "a b"):
        url = (await presign(trusting, sid, **{"X-Forwarded-Proto": "javascript", "X-Forwarded-Host": host}))["url"]
        assert url.startswith(f"http://127.0.0.1:{trusting.port}/v1/links/"), (host, url)


@pytest.mark.parametrize("value", ["ftp://example.com", "example.com", "https://user@example.com", "https://x.example/?a=1"])
def test_a_public_url_that_is_no_http_base_is_refused_at_start(tmp_path, value) -> None:
    assert make_config(tmp_path, server={"public_url": "https://ok.example/"}).server.public_url == "https://ok.example"
    with pytest.raises(ValidationError, match="public_url"):
        make_config(tmp_path, server={"public_url": value})
