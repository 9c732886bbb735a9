"""The preview proxy and the console's cookie: a session's server never receives the console's
session cookie, cannot set it (session fixation), and cannot widen a service worker's scope to the
console (Service-Worker-Allowed)."""

from __future__ import annotations

import aiohttp
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, listening, new_session, preview_of, start

pytestmark = NATIVE_ROOT_SERVICE

GUEST_SERVER = r'''
import http.server, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("cookie=" + (self.headers.get("Cookie") or "")).encode()
        self.send_response(200)
        self.send_header("Set-Cookie", "wr_console=fixated; Path=/v1/")
        self.send_header("Set-Cookie", "wr_console_oauth=fixated; Path=/oauth/")
        self.send_header("Set-Cookie", "app=1; Path=/")
        self.send_header("Service-Worker-Allowed", "/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


async def test_the_console_cookie_neither_reaches_nor_comes_from_a_sessions_server(start_secure) -> None:
    secure = await start_secure(**SECTIONS)
    sid = await new_session(secure)
    status, _, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/server.py", "a_member", data=GUEST_SERVER)
    assert status in (200, 201)
    info = await start(secure, sid, command=["python3", "server.py", "8081"], name="guest")
    await listening(secure, sid, info["id"], 8081)
    preview = await preview_of(secure, sid, 8081)
    headers = preview.headers(Cookie="app=1; wr_console=the-consoles-session; other=2; wr_console_oauth=the-same")
    async with aiohttp.ClientSession() as http, http.get(preview.base + "/", headers=headers) as response:
        assert response.status == 200
        assert await response.text() == "cookie=app=1; other=2"
        set_cookies = response.headers.getall("Set-Cookie", [])
        assert set_cookies == ["app=1; Path=/"]
        assert "Service-Worker-Allowed" not in response.headers
