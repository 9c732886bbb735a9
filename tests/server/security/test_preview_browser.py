"""Previews in a real headless Chromium: a Vite dev server inside a session's native sandbox hot-reloads
through its preview (root-absolute module paths, the HMR WebSocket, a sandboxed opaque-origin page), and
no page, neither a preview nor a tenant's file on the API's origin, gets a service worker that controls
the API's origin."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from process_calls import NATIVE_ROOT_SERVICE, new_session, preview_of, start
from server_helpers import eventually

playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed (pip install playwright)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [*NATIVE_ROOT_SERVICE, pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
              pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (it installs Vite)")]
TIMEOUT_MS = 30_000
VITE = "vite@7"
"""Vite 7 runs on the node of the native tier (20.19+); Vite 8 needs a newer one."""
SECTIONS = {"workers": {"kernel_workers": 0}, "processes": {"max_live": 3, "stop_grace_s": 0.5}}

INDEX = '<!doctype html><html><body><p id="app">loading</p><script type="module" src="/main.js"></script></body></html>'
MAIN = "import { message } from '/message.js';\ndocument.getElementById('app').textContent = message;\n"
MESSAGE = """export const message = %r;
document.getElementById('app').textContent = message;
if (import.meta.hot) import.meta.hot.accept();  // replaced in place: no reload of the page
"""


@pytest.fixture(scope="session")
def vite_modules(pytestconfig: pytest.Config) -> Path:
    """Vite's node_modules, installed once from the npm registry and kept in the pytest cache."""
    root = Path(pytestconfig.cache.mkdir("preview-vite7"))
    modules = root / "node_modules"
    if not (modules / "vite" / "package.json").is_file():
        staging = root / f"staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(staging), VITE],
                       check=True, capture_output=True, timeout=300)
        shutil.rmtree(modules, ignore_errors=True)
        (staging / "node_modules").rename(modules)
        shutil.rmtree(staging, ignore_errors=True)
    return modules


async def test_vite_hot_reload_through_the_preview_and_no_service_worker_on_the_api_origin(
        start_secure, vite_modules: Path) -> None:
    secure = await start_secure(**SECTIONS)
    sid = await new_session(secure)
    for path, text in (("index.html", INDEX), ("main.js", MAIN), ("message.js", MESSAGE % "before"),
                       ("sw.js", "self.addEventListener('fetch', () => {});")):
        status, _, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/{path}", "a_member", data=text)
        assert status in (200, 201)
    workspace = secure.data_dir / "sessions" / sid / "files"
    assert (workspace / "index.html").is_file()
    shutil.copytree(vite_modules, workspace / "node_modules", symlinks=True)  # as `npm install` would leave it
    vite = await start(secure, sid, name="vite", command=[
        "node", "node_modules/vite/bin/vite.js", "--host", "127.0.0.1", "--port", "5173", "--strictPort"])

    async def listening() -> bool:
        _, info, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{vite['id']}", "a_member")
        assert info["state"] in ("starting", "running"), info
        return 5173 in info.get("ports", [])

    await eventually(listening, timeout=60, interval=0.1)
    preview = await preview_of(secure, sid, 5173)
    status, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/sw.js:presign", "a_member", json={})
    assert status == 200
    api = str(secure.client.make_url("")).rstrip("/")

    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await (await browser.new_context()).new_page()
            await page.goto(preview.url)  # *.localhost resolves to loopback in Chromium
            await page.wait_for_function("document.getElementById('app').textContent === 'before'",
                                         timeout=TIMEOUT_MS)
            assert await page.evaluate("origin") == "null"  # the sandbox: an opaque origin of its own
            await page.evaluate("window.__marker = 'kept'")
            status, _, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/message.js", "a_member",
                                             data=MESSAGE % "after")
            assert status in (200, 201)
            await page.wait_for_function("document.getElementById('app').textContent === 'after'",
                                         timeout=TIMEOUT_MS)
            assert await page.evaluate("window.__marker") == "kept"  # updated in place, never reloaded

            attempt = """async () => {
                if (!('serviceWorker' in navigator)) return 'no service workers here';
                try { await navigator.serviceWorker.register('/sw.js', {scope: '/'}); return 'registered'; }
                catch (e) { return 'refused: ' + e.name; } }"""
            assert (await page.evaluate(attempt)) != "registered"
            # a tenant's JavaScript file on the API's origin (a presigned link) cannot become its worker
            api_page = await page.context.new_page()
            await api_page.goto(api + "/healthz")
            own = """async link => {
                try { await navigator.serviceWorker.register(link); return 'registered'; }
                catch (e) { return 'refused: ' + e.name; } }"""
            assert (await api_page.evaluate(own, link["url"])).startswith("refused")
            assert await api_page.evaluate("navigator.serviceWorker.getRegistrations().then(r => r.length)") == 0
            await api_page.goto(api + "/console/")
            assert await api_page.evaluate("navigator.serviceWorker.controller") is None
        finally:
            await browser.close()
