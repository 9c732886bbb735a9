"""OAuth 2.0 as an app and a member's browser drive it, against a service on 127.0.0.1: the app is Authlib's
own httpx client; the browser signs in to the console with a member key and approves on the consent page."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import httpx
from aiohttp.test_utils import TestServer
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client
from server_helpers import make_config

from wasm_runner_server.app import create_app
from wasm_runner_server.security import stores

REDIRECT = "http://127.0.0.1:9/callback"
"""The app's registered callback: never contacted (the test reads the redirect instead of following it)."""
ALL = "sessions:read sessions:write exec files:read files:write processes"


@dataclass
class Service:
    base: str
    keys: dict[str, str]

    def auth(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[name]}"}


async def start_service(tmp_path: Path, servers: list[TestServer], store: str = "sqlite", **oauth: float) -> Service:
    """A service with keys on 127.0.0.1 (`store`: its metadata database): alice (alpha) and bob (beta), members;
    an app key of alpha; an admin."""
    data_dir = tmp_path / "data"
    tenants = stores.tenant_store(make_config(data_dir, store={"url": store}), data_dir)
    keys = {}
    for name, workspace, kind, member in [("alice", "alpha", "member", "alice"), ("bob", "beta", "member", "bob"),
                                          ("app_key", "alpha", "app", None), ("admin", "ops", "admin", "root")]:
        keys[name], _ = tenants.create_key(workspace, name, kind, member)
    tenants.close()
    config = make_config(data_dir, auth={"enabled": True, "oauth": oauth}, store={"url": store})
    server = TestServer(create_app(config), host="127.0.0.1", port=0)
    await server.start_server()
    servers.append(server)
    return Service(str(server.make_url("")).rstrip("/"), keys)


async def register(service: Service, *, public: bool = True, scopes: str = ALL) -> dict:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{service.base}/v1/admin/oauth/clients", headers=service.auth("admin"),
                                   json={"name": "Notebook app", "redirect_uris": [REDIRECT], "public": public,
                                         "scopes": scopes.split(), "workspace": "alpha"})
    assert response.status_code == 201, response.text
    return response.json()


def app_client(service: Service, app: dict, scope: str) -> AsyncOAuth2Client:
    return AsyncOAuth2Client(app["client_id"], app.get("client_secret"), scope=scope, redirect_uri=REDIRECT,
                             code_challenge_method="S256",
                             token_endpoint_auth_method="none" if app["public"] else "client_secret_basic")


class Browser:
    """A member's browser: a cookie jar signed in to the console."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))  # cookies for 127.0.0.1

    async def sign_in(self, key: str) -> None:
        async with self.http.post(f"{self.service.base}/v1/console/session", json={"key": key}) as response:
            assert response.status == 200, await response.text()

    async def open(self, url: str) -> tuple[int, str, str | None]:
        async with self.http.get(url, allow_redirects=False) as response:
            return response.status, await response.text(), response.headers.get("Location")

    async def decide(self, url: str, page: str, decision: str) -> tuple[int, str | None]:
        token = re.search(r'name=csrf_token value="([^"]+)"', page)
        assert token, page
        async with self.http.post(url, data={"csrf_token": token.group(1), "decision": decision},
                                  headers={"Origin": self.service.base}, allow_redirects=False) as response:
            return response.status, response.headers.get("Location")

    async def close(self) -> None:
        await self.http.close()


async def authorize(service: Service, browser: Browser, client: AsyncOAuth2Client, verifier: str) -> str:
    """The member approves: the redirect back to the app (with its code)."""
    url, state = client.create_authorization_url(f"{service.base}/oauth/authorize", code_verifier=verifier)
    status, page, location = await browser.open(url)
    if status == 200:
        assert "Notebook app" in page and "alice" in page
        status, location = await browser.decide(url, page, "approve")
    assert status == 302 and location is not None, page
    assert parse_qs(urlsplit(location).query)["state"] == [state]
    return location


async def get_tokens(service: Service, browser: Browser, scope: str = ALL, *,
                     app: dict | None = None) -> tuple[AsyncOAuth2Client, dict]:
    app = app or await register(service)
    client = app_client(service, app, scope)
    verifier = generate_token(48)
    location = await authorize(service, browser, client, verifier)
    token = await client.fetch_token(f"{service.base}/oauth/token", authorization_response=location,
                                     code_verifier=verifier)
    return client, token


async def call(service: Service, method: str, path: str, access_token: str, **kwargs) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.request(method, service.base + path, headers={"Authorization": f"Bearer {access_token}"},
                                  **kwargs)


