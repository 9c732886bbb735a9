"""The console's page and assets: served from the package without a key, pinned files matching their
lock, a Content-Security-Policy on every response under /console, guest bytes sandboxed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from server_helpers import call, new_session

from wasm_runner_server.console.routes import CONSOLE_CSP

VENDOR = Path(__file__).resolve().parents[3] / "wasm_runner_server" / "console" / "vendor"


def test_every_vendored_file_matches_its_lock_and_nothing_else_is_vendored():
    lock = json.loads((VENDOR / "vendor.lock").read_text())["files"]
    assert {entry["file"] for entry in lock} == {p.name for p in VENDOR.iterdir()} - {"vendor.lock"}
    for entry in lock:
        assert hashlib.sha256((VENDOR / entry["file"]).read_bytes()).hexdigest() == entry["sha256"], entry["file"]
        assert entry["version"] and entry["package"] and entry["tarball_integrity"].startswith("sha512-")


async def test_the_page_and_its_assets_need_no_key_and_carry_the_policy(serve):
    client = await serve(auth={"enabled": True})
    async with client.get("/console", allow_redirects=False) as response:
        assert response.status == 302 and response.headers["Location"] == "/console/"
        assert response.headers["Content-Security-Policy"] == CONSOLE_CSP
    async with client.get("/console/") as response:
        page = await response.text()
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/html")
        assert response.headers["Content-Security-Policy"] == CONSOLE_CSP
        assert response.headers["X-Frame-Options"] == "DENY"
    assert "<script>" not in page and "script-src 'self'" in CONSOLE_CSP and "unsafe-eval" not in CONSOLE_CSP
    for asset in ("/console/static/app.js", "/console/vendor/pdf.min.mjs", "/console/vendor/highlight.min.js"):
        async with client.get(asset) as response:
            assert response.status == 200 and response.headers["Content-Type"].startswith("text/javascript"), asset
            assert response.headers["Content-Security-Policy"] == CONSOLE_CSP
            etag = response.headers["ETag"]
        async with client.get(asset, headers={"If-None-Match": etag}) as response:
            assert response.status == 304
    for missing in ("/console/static/nope.js", "/console/vendor/vendor.lock", "/console/static/../app.py"):
        async with client.get(missing) as response:
            assert response.status == 404 and "Content-Security-Policy" in response.headers, missing
    status, _ = await call(client, "GET", "/v1/sessions")
    assert status == 401  # the API still needs a key


async def test_the_parser_frame_gets_an_opaque_origin(client):
    async with client.get("/console/static/sheet-frame.html") as response:
        policy = response.headers["Content-Security-Policy"]
        assert policy.startswith("sandbox allow-scripts;") and "allow-same-origin" not in policy


async def test_guest_files_are_served_sandboxed_as_downloads(client):
    sid = await new_session(client)
    await call(client, "PUT", f"/v1/sessions/{sid}/files/page.html", data=b"<script>parent.x=1</script>")
    async with client.get(f"/v1/sessions/{sid}/files/page.html") as response:
        assert response.headers["Content-Security-Policy"].startswith("sandbox;")
        assert "attachment" in response.headers["Content-Disposition"]
