"""The preview proxy and the console's cookie: a session's server never receives the console's
session cookie, cannot set it (session fixation), and cannot widen a service worker's scope to the
console (Service-Worker-Allowed)."""

from __future__ import annotations

from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, listening, new_session, start

pytestmark = NATIVE_ROOT_SERVICE

GUEST_SERVER = r'''
import http.server, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("cookie=" + (self.headers.get("Cookie") or "")).encode()
        self.send_response(200)
        self.send_header("Set-Cookie", "wr_console=fixated; Path=/v1/")
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
    status, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/ports/8081:presign", "a_member", json={})
    assert status == 200, link
    for path, key in [(f"/v1/sessions/{sid}/ports/8081/", "a_member"), (link["url"], None)]:
        headers = {"Cookie": "app=1; wr_console=the-consoles-session; other=2"}
        if key is not None:
            headers.update(secure.auth(key))
        async with secure.client.session.get(secure.client.make_url(path), headers=headers) as response:
            assert response.status == 200
            assert await response.text() == "cookie=app=1; other=2"
            set_cookies = response.headers.getall("Set-Cookie", [])
            assert set_cookies == ["app=1; Path=/"]
            assert "Service-Worker-Allowed" not in response.headers
