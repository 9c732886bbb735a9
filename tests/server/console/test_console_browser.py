"""The console in a real headless Chromium (Debian's, driven by Playwright): sign in, a session's files
in their views, a diff after a PATCH, a Python cell, publishing and downloading an artifact, a terminal,
and guest-written HTML, SVG and Markdown whose scripts never run in the console. Screenshots go to
test-output/console/ (gitignored)."""

from __future__ import annotations

import shutil
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from server_helpers import make_config

from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_server.app import create_app
from wasm_runner_server.http.preview_server import refuse_service_worker
from wasm_runner_server.security.tenants import TenantStore

playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed (pip install playwright)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")]
_bwrap = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed" if _bwrap is None else probe(_bwrap)
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
"""The tests whose sessions run a shell or a server natively."""
SHOTS = Path(__file__).resolve().parents[3] / "test-output" / "console"
TIMEOUT_MS = 20_000


def png(width: int, height: int) -> bytes:
    """A real PNG: a bar chart's worth of coloured columns."""
    rows = b"".join(b"\x00" + b"".join(bytes((40 * (x % 6), 120, 200)) if y > height * (x % 5) / 5 else b"\xff\xff\xff"
                                       for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def pdf() -> bytes:
    """A one-page PDF drawing a filled rectangle and a line of text."""
    content = b"0 0.4 0.8 rg 50 50 200 100 re f BT /F1 24 Tf 60 200 Td (Quarterly report) Tj ET"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 300] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


def xlsx(rows: list[list[str]]) -> bytes:
    """A minimal workbook (one sheet, inline strings), as spreadsheet programs write them."""
    import io
    import zipfile
    from xml.sax.saxutils import escape

    def cell(ref: str, value: str) -> str:
        return f'<c r="{ref}" t="inlineStr"><is><t>{escape(value)}</t></is></c>'

    body = "".join(f'<row r="{y}">' + "".join(cell(f"{chr(65 + x)}{y}", v) for x, v in enumerate(row)) + "</row>"
                   for y, row in enumerate(rows, 1))
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    parts = {
        "[Content_Types].xml": '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
        'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships'
        '+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override '
        'PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.worksheet+xml"/></Types>',
        "_rels/.rels": f'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
        f'relationships"><Relationship Id="r1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<?xml version="1.0"?><workbook xmlns="{main}" xmlns:r="{rel}"><sheets><sheet name="S" '
        'sheetId="1" r:id="r1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/'
        f'package/2006/relationships"><Relationship Id="r1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
        '</Relationships>',
        "xl/worksheets/sheet1.xml": f'<?xml version="1.0"?><worksheet xmlns="{main}"><sheetData>{body}</sheetData>'
        '</worksheet>',
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in parts.items():
            archive.writestr(name, text)
    return out.getvalue()


GUEST_WRITES = r'''
marker = ("window.top.__pwned = 1; try { window.top.document.title = 'pwned'; } catch (e) {} "
          "try { window.top.sessionStorage.setItem('pwned', '1'); } catch (e) {}")
open("evil.html", "w").write(f"<h1>hello</h1><script>{marker}</script><img src=x onerror=\"{marker}\">")
open("evil.svg", "w").write(f'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40" onload="{marker}">'
                            f'<script>{marker}</script><rect width="40" height="40" fill="red"/></svg>')
open("evil.md", "w").write(f"# Evil\n\n<script>{marker}</script>\n\n<img src=x onerror=\"{marker}\">\n\n"
                           f"<iframe srcdoc=\"<script>{marker}</script>\"></iframe>\n\n[x](javascript:{marker})\n")
print("written")
'''


@dataclass
class Console:
    page: Any
    base: str
    key: str
    client: TestClient
    problems: list[str]
    """Console errors and failed requests (4xx/5xx answers) of the page so far."""

    async def api(self, method: str, path: str, **kwargs: Any) -> Any:
        async with self.client.request(method, path, headers={"Authorization": f"Bearer {self.key}"}, **kwargs) as r:
            assert r.status < 400, await r.text()
            return await r.json()

    async def go(self, hash_: str) -> None:
        await self.page.evaluate("""h => { document.getElementById('view').removeAttribute('data-ready');
            if (location.hash === h) window.dispatchEvent(new HashChangeEvent('hashchange')); else location.hash = h; }""",
                                 hash_)
        await self.page.wait_for_selector(f'#view[data-ready="{hash_}"]', state="attached", timeout=TIMEOUT_MS)

    async def open_file(self, sid: str, path: str) -> None:
        from urllib.parse import quote

        await self.go(f"#/session/{quote(sid, safe='')}/file/{quote(path, safe='')}")

    async def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        await self.page.wait_for_timeout(250)  # frames paint after their content is in the DOM
        await self.page.screenshot(path=str(SHOTS / f"{name}.png"))  # full_page leaves sandboxed frames blank


BLOB_WATCH = """(() => {
  const live = new Set();
  window.__liveBlobs = live;
  const create = URL.createObjectURL, revoke = URL.revokeObjectURL;
  URL.createObjectURL = (o) => { const u = create.call(URL, o); live.add(u); return u; };
  URL.revokeObjectURL = (u) => { live.delete(u); return revoke.call(URL, u); };
})();"""
"""Records every object URL the console makes and has not revoked (window.__liveBlobs)."""


@asynccontextmanager
async def open_console(tmp_path: Path, sign_in: bool = True,
                       add_routes: Callable[[web.Application], None] | None = None,
                       **sections: Any) -> AsyncIterator[Console]:
    store = TenantStore.in_data_dir(tmp_path / "data")
    key, _ = store.create_key("alpha", "browser", "member")
    store.close()
    config = make_config(tmp_path / "data", auth={"enabled": True}, **sections)
    app = create_app(config)
    if add_routes is not None:
        add_routes(app)
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    base = str(client.make_url("")).rstrip("/")
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = await browser.new_context(viewport={"width": 1280, "height": 1100}, accept_downloads=True)
        await context.add_init_script(BLOB_WATCH)
        page = await context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        problems: list[str] = []  # what a user would see in the browser's console: errors and failed requests
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("requestfailed", lambda r: problems.append(f"failed {r.method} {r.url}: {r.failure}"))
        page.on("response", lambda r: problems.append(f"{r.status} {r.request.method} {r.url}")
                if r.status >= 400 else None)
        await page.goto(base + "/console/")
        if sign_in:
            await page.fill("#key", key)
            await page.click("#sign-in-form button[type=submit]")
            await page.wait_for_selector('#view[data-ready="#/sessions"]', state="attached")
        try:
            yield Console(page, base, key, client, problems)
            assert errors == []  # no script error in the console itself
        finally:
            await browser.close()
            await client.close()


@pytest_asyncio.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    async with open_console(tmp_path) as opened:
        yield opened


async def test_sign_in_keeps_the_key_out_of_urls_and_lists_the_sessions(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    await console.go("#/sessions")
    await console.page.wait_for_selector(f'tr[data-session="{sid}"]')
    assert console.key not in console.page.url
    await console.shot("sessions")
    await console.page.click("#sign-out")
    await console.page.wait_for_selector("#sign-in", state="visible")
    assert await console.page.context.cookies() == []  # the cookie is cleared
    status = await console.page.evaluate("fetch('/v1/sessions').then(r => r.status)")
    assert status == 401  # and its session is over


async def test_csv_xlsx_png_markdown_and_pdf_are_rendered(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    files = {"data/scores.csv": b"name,score\nada,3\nbob,10\ncy,7\n", "chart.png": png(120, 80),
             "report.md": b"# Quarterly report\n\nAll **good**.\n", "report.pdf": pdf(),
             "sheet.xlsx": xlsx([["region", "sales"], ["north", "12"], ["south", "30"]])}
    for path, data in files.items():
        await console.api("PUT", f"/v1/sessions/{sid}/files/{path}", data=data)
    page = console.page

    await console.open_file(sid, "data/scores.csv")
    cells = page.locator("table.data tbody td")
    assert await cells.nth(0).text_content() == "ada"
    await page.click("table.data th:nth-child(2)")  # sort by score, numerically
    assert [await cells.nth(i).text_content() for i in (1, 3, 5)] == ["3", "7", "10"]
    await console.shot("csv")

    await console.open_file(sid, "sheet.xlsx")  # parsed in the opaque-origin frame, shown as a table here
    assert [await cells.nth(i).text_content() for i in range(4)] == ["north", "12", "south", "30"]
    assert await page.locator("iframe[title='spreadsheet parser']").count() == 0

    await console.open_file(sid, "chart.png")
    image = page.locator("img.preview")
    await image.wait_for()
    await page.wait_for_function("() => document.querySelector('img.preview').complete")
    assert await image.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [120, 80]
    await console.shot("png")

    await console.open_file(sid, "report.md")
    frame = page.frame_locator("iframe.preview")
    assert await frame.locator("h1").text_content() == "Quarterly report"
    assert await frame.locator("strong").text_content() == "good"
    await console.shot("markdown")

    await console.open_file(sid, "report.pdf")
    canvas = page.locator('canvas.pdf-page[data-rendered="true"]')
    await canvas.wait_for()
    coloured = await canvas.evaluate("""c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 100 && d[i + 2] > 150) n++; return n; }""")
    assert coloured > 1000  # the blue rectangle was drawn
    await console.shot("pdf")


async def test_a_patch_shows_as_a_diff_with_added_and_removed_lines(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    await console.api("PUT", f"/v1/sessions/{sid}/files/app.py", data=b"def total(xs):\n    return sum(xs)\n")
    await console.api("PATCH", f"/v1/sessions/{sid}/files/app.py",
                      json={"old_text": "return sum(xs)", "new_text": "return sum(xs) + 1"})
    await console.open_file(sid, "app.py")
    page = console.page
    assert "return sum(xs) + 1" in await page.locator("pre.code").text_content()
    assert await page.locator("pre.code .hljs-keyword").count() > 0  # highlighted
    deleted = page.locator(".d2h-del .d2h-code-line-ctn")
    inserted = page.locator(".d2h-ins .d2h-code-line-ctn")
    assert "return sum(xs)" in await deleted.first.text_content()
    assert "return sum(xs) + 1" in await inserted.first.text_content()
    await page.select_option('select[aria-label="diff layout"]', "side-by-side")
    await page.locator(".d2h-file-side-diff").first.wait_for()
    await console.shot("diff")


async def test_a_python_cell_streams_its_output(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    await console.go(f"#/session/{sid}")
    page = console.page
    await page.fill("textarea.cell", "for i in range(3):\n    print('line', i)\n6 * 7")
    await page.click("button.run")
    await page.wait_for_function("() => document.querySelector('.cell-status').textContent.startsWith('exit')")
    output = await page.locator("pre.output").text_content()
    assert "line 0\nline 1\nline 2\n" in output and "42" in output
    await console.shot("cell")


async def test_publish_an_artifact_and_download_it_through_its_link(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    await console.api("PUT", f"/v1/sessions/{sid}/files/out/result.txt", data=b"the answer is 42\n")
    await console.open_file(sid, "out/result.txt")
    page = console.page
    await page.fill("input.note", "final")
    await page.click("button.publish")
    row = page.locator("table.artifacts tbody tr")
    await row.first.wait_for()
    assert await row.locator(".artifact-name").text_content() == "result.txt"
    await row.locator("button.download").click()
    link = page.locator("a.artifact-link")
    await link.wait_for()
    href = await link.get_attribute("href")
    assert href.startswith(console.base + "/v1/artifact-links/") and console.key not in href  # absolute
    async with page.expect_download() as waiting:
        await link.click()
    download = await waiting.value
    assert Path(await download.path()).read_bytes() == b"the answer is 42\n"
    await console.shot("artifact")
    await console.go("#/artifacts")
    assert await page.locator("table.artifacts .artifact-name").text_content() == "result.txt"


async def test_guest_written_html_svg_and_markdown_cannot_run_script_in_the_console(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    result = await console.api("POST", f"/v1/sessions/{sid}/exec", json={"code": GUEST_WRITES})
    assert result["stdout"] == "written\n", result
    page = console.page
    title = await page.title()
    for path in ("evil.html", "evil.svg", "evil.md"):
        await console.open_file(sid, path)
        await page.wait_for_timeout(300)  # give any script (load, error handlers) its chance
        await console.shot(path.replace(".", "-"))
        assert await page.evaluate("window.__pwned") is None, path
        assert await page.evaluate("sessionStorage.getItem('pwned')") is None, path
        assert await page.title() == title, path
        if path == "evil.svg":  # rasterised, shown from a data: URL: no blob: URL of this origin holds guest bytes
            image = page.locator("img.preview")
            assert (await image.get_attribute("src")).startswith("data:image/png;base64,")
            assert await image.evaluate("img => img.decode().then(() => [img.naturalWidth, img.naturalHeight])") == [
                40, 40]
            assert await page.evaluate("window.__liveBlobs.size") == 0
    frame = page.frame_locator("iframe.preview")
    assert await frame.locator("h1").text_content() == "Evil"  # the Markdown was rendered, its script dropped
    assert await frame.locator("script").count() == 0


@needs_sandbox
async def test_the_terminal_runs_a_shell_in_the_session_over_a_link_without_the_key(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    page = console.page
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    await console.go(f"#/session/{sid}")
    await page.click("#tab-terminal")  # the terminal is a tab of the bottom panel
    await page.click("button.terminal-open")
    await page.wait_for_selector(".terminal-screen[data-process]")
    await page.keyboard.type("echo $((6*7))\n")
    await page.wait_for_function(
        "() => [...document.querySelectorAll('.terminal-screen .xterm-rows > div')].some(r => r.textContent.trim() === '42')")
    await console.shot("terminal")
    assert len(sockets) == 1 and "/v1/pty-links/" in sockets[0] and console.key not in sockets[0]
    processes = await console.api("GET", f"/v1/sessions/{sid}/processes")
    assert [p["state"] for p in processes["processes"]] == ["running"]
    await page.click("button.terminal-close")
    await page.wait_for_selector('.terminal[data-state="closed"]', state="attached")


# -- the console's credential out of script's reach ------------------------------------------------


async def test_a_page_script_cannot_read_the_key_nor_change_anything_without_the_csrf_token(console):
    page = console.page
    cookies = await page.context.cookies()
    assert sorted((c["name"], c["httpOnly"], c["sameSite"], c["path"]) for c in cookies) == [
        ("wr_console", True, "Strict", "/v1/"), ("wr_console_oauth", True, "Lax", "/oauth/")]
    assert all(console.key not in c["value"] for c in cookies)
    seen = await page.evaluate("""async () => ({
        cookie: document.cookie, session: sessionStorage.length, local: localStorage.length,
        databases: (await indexedDB.databases()).length, caches: (await caches.keys()).length,
        html: document.documentElement.outerHTML })""")
    assert seen["cookie"] == "" and seen["session"] == 0 and seen["local"] == 0
    assert seen["databases"] == 0 and seen["caches"] == 0 and console.key not in seen["html"]
    # what a script of this origin (a guest's page, say) sends with the cookie but without the token
    before = await console.api("GET", "/v1/sessions")
    refused = await page.evaluate("""async () => {
        const post = await fetch('/v1/sessions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                   body: '{}' });
        const read = await fetch('/v1/sessions');
        const token = await fetch('/v1/console/session');
        return [post.status, (await post.json()).error.code, read.status, token.status]; }""")
    assert refused == [403, "csrf_refused", 403, 405]  # the cookie alone neither changes nor reads
    # and a page of another site, whatever it sends, gets no cookie along (SameSite=Strict)
    other = await page.context.new_page()
    await other.goto(console.base.replace("127.0.0.1", "localhost") + "/healthz")  # a page with no policy
    await other.evaluate("""url => fetch(url, { method: 'POST', mode: 'no-cors', credentials: 'include',
        headers: { 'Content-Type': 'text/plain' }, body: '{}' })""", console.base + "/v1/sessions")
    assert (await console.api("GET", "/v1/sessions"))["sessions"] == before["sessions"]
    # the console itself sends its token: creating a session works
    await page.click("#new-session")
    await page.wait_for_function("() => location.hash.startsWith('#/session/')")
    assert len((await console.api("GET", "/v1/sessions"))["sessions"]) == len(before["sessions"]) + 1


async def test_a_sign_in_link_signs_in_without_the_key_and_leaves_the_address_bar_and_history(tmp_path):
    async with open_console(tmp_path, sign_in=False) as console:
        made = await console.api("POST", "/v1/console/sign-in-links")
        assert console.key not in made["url"]
        page = console.page
        await page.goto(made["url"])
        await page.wait_for_selector('#view[data-ready="#/sessions"]', state="attached")
        assert "sign-in" not in page.url and page.url.endswith("/console/#/sessions")
        await page.go_back()  # the link is not in the history either: back leaves the console
        assert "sign-in=" not in page.url
        await page.click("#sign-out")
        await page.wait_for_selector("#sign-in", state="visible")
        await page.goto(made["url"])  # a second opening signs nothing in
        await page.wait_for_selector("#sign-in-error:has-text('unknown, used or expired')")
        assert await page.is_visible("#sign-in")
        console.problems.clear()  # (that refusal is a 401 by design)


async def test_a_reload_forgets_the_token_and_asks_for_the_key_again(console):
    page = console.page
    await page.reload()
    await page.wait_for_selector("#sign-in", state="visible")
    assert await page.evaluate("sessionStorage.length + localStorage.length") == 0
    assert await page.evaluate("fetch('/v1/sessions').then(r => r.status)") == 403  # the cookie alone is inert
    await page.fill("#key", console.key)
    await page.click("#sign-in-form button[type=submit]")
    await page.wait_for_selector('#view[data-ready="#/sessions"]', state="attached")


async def test_the_console_refuses_to_run_under_a_service_worker(tmp_path):
    async def planted(request: web.Request) -> web.Response:
        # stands for guest content that got a service worker registered over the console's path
        return web.Response(text="self.addEventListener('fetch', () => {});", content_type="text/javascript")

    def plant(app: web.Application) -> None:
        # The API's origin refuses every service worker script (tested with previews); the console's own
        # refusal is the second line, tested here with that first line taken away.
        app.middlewares[:] = [m for m in app.middlewares if m is not refuse_service_worker]
        app.router.add_get("/console/planted-sw.js", planted)

    async with open_console(tmp_path, sign_in=False, add_routes=plant) as console:
        page = console.page
        await page.evaluate("""async () => { await navigator.serviceWorker.register('/console/planted-sw.js',
            { scope: '/console/' }); await navigator.serviceWorker.ready; }""")
        sent: list[str] = []
        page.on("request", lambda request: sent.append(request.url))
        await page.reload()
        assert await page.evaluate("navigator.serviceWorker.controller !== null")
        await page.wait_for_selector("#service-worker-refused")
        assert not await page.is_visible("#sign-in")
        assert [url for url in sent if "/v1/" in url] == []  # not even the sign-in state was asked
        await page.wait_for_function("async () => (await navigator.serviceWorker.getRegistrations()).length === 0")


@needs_sandbox
async def test_an_osc8_link_in_the_terminal_opens_without_an_opener_and_never_on_the_console_origin(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    page = console.page
    other_origin = console.base.replace("127.0.0.1", "localhost") + "/console/"
    same_origin = console.base + f"/v1/sessions/{sid}/files/evil.html"
    await console.go(f"#/session/{sid}")
    await page.click("#tab-terminal")  # the terminal is a tab of the bottom panel
    await page.click("button.terminal-open")
    await page.wait_for_selector(".terminal-screen[data-process]")
    command = (f"printf '\\n\\e]8;;{same_origin}\\e\\\\SAMEORIGINLINK\\e]8;;\\e\\\\\\n"
               f"\\e]8;;{other_origin}\\e\\\\OTHERORIGINLINK\\e]8;;\\e\\\\\\n'\n")
    await page.keyboard.type(command)

    async def click(marker: str) -> None:
        handle = await page.wait_for_function("""marker => {
            const rows = [...document.querySelectorAll('.terminal-screen .xterm-rows > div')];
            const row = rows.find(r => r.textContent.trim() === marker);
            if (!row) return null;
            const screen = document.querySelector('.terminal-screen .xterm-screen').getBoundingClientRect();
            const box = row.getBoundingClientRect();
            const cell = screen.width / 100;
            return { x: box.left + cell * 3.5, y: box.top + box.height / 2 }; }""", arg=marker)
        point = await handle.json_value()
        await page.mouse.move(point["x"] - 5, point["y"])
        await page.mouse.move(point["x"], point["y"])  # xterm finds the link under a moving pointer
        await page.wait_for_function("() => document.querySelector('.terminal-screen .xterm-screen')"
                                     ".classList.contains('xterm-cursor-pointer')")
        await page.mouse.click(point["x"], point["y"])

    await click("SAMEORIGINLINK")
    refused = page.locator(".link-prompt .link-refused")
    await refused.wait_for()
    assert same_origin in await refused.text_content() and "own origin" in await refused.text_content()
    assert await page.locator(".link-prompt .link-open").count() == 0
    assert len(page.context.pages) == 1

    await click("OTHERORIGINLINK")
    assert await page.locator(".link-prompt .link-target").text_content() == other_origin  # the full target
    async with page.context.expect_page() as waiting:
        await page.click(".link-prompt .link-open")
    opened = await waiting.value
    await opened.wait_for_load_state()
    assert opened.url == other_origin
    assert await opened.evaluate("window.opener === null && document.referrer === ''")
    await console.shot("terminal-link")


async def test_names_with_newlines_and_bidi_controls_are_shown_escaped_and_open(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    result = await console.api("POST", f"/v1/sessions/{sid}/exec", json={"code": (
        "open('line\\nbreak.txt', 'w').write('newline file')\n"
        "open('rtl-\\u202egnp.exe', 'w').write('bidi file')\nprint('written')")})
    assert result["stdout"] == "written\n", result
    await console.go(f"#/session/{sid}")
    page = console.page
    labels = await page.locator(".tree button.file").all_text_contents()
    assert sorted(labels) == ["line\\nbreak.txt", "rtl-\\u202egnp.exe"]  # visible escapes, no raw control
    await page.click('.tree button.file:text-is("line\\\\nbreak.txt")')
    await page.wait_for_selector('#view[data-ready^="#/session/"]', state="attached")
    await page.wait_for_function("() => document.querySelector('pre.code')?.textContent.includes('newline file')")
    assert await page.locator(".file-name").text_content() == "line\\nbreak.txt"
    await console.shot("escaped-names")


GUEST_PAGE = """<!doctype html><body><script>
(async () => {
  const api = decodeURIComponent(location.hash.slice(1));  // the console's origin, where its cookie lives
  const attempt = async (f) => { try { return (await f()).status; } catch (e) { return 'blocked'; } };
  const out = { origin: origin, cookie: (() => { try { return document.cookie; } catch (e) { return 'denied'; } })() };
  out.storage = (() => { try { return sessionStorage.length + localStorage.length; } catch (e) { return 'denied'; } })();
  out.read = await attempt(() => fetch(api + '/v1/sessions', { credentials: 'include' }));
  out.write = await attempt(() => fetch(api + '/v1/sessions', { method: 'POST', credentials: 'include',
                                         headers: { 'Content-Type': 'application/json' }, body: '{}' }));
  out.token = await attempt(() => fetch(api + '/v1/console/session', { credentials: 'include' }));
  document.body.dataset.result = JSON.stringify(out);
})();
</script></body>"""


@needs_sandbox
async def test_a_guest_preview_page_gets_neither_the_key_nor_the_console_session(console):
    """The finding as it was: a guest's web page, opened through a preview link in the browser where the
    console is signed in. It is served on an opaque origin of its own now, and reaches nothing of the console."""
    import json

    from server_helpers import eventually

    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    await console.api("PUT", f"/v1/sessions/{sid}/files/site/index.html", data=GUEST_PAGE.encode())
    process = await console.api("POST", f"/v1/sessions/{sid}/processes", json={
        "command": ["python3", "-m", "http.server", "8090", "--bind", "127.0.0.1"], "cwd": "site"})

    async def listening() -> bool:
        info = await console.api("GET", f"/v1/sessions/{sid}/processes/{process['id']}")
        return 8090 in info.get("ports", [])

    await eventually(listening, timeout=15, interval=0.05)
    link = await console.api("POST", f"/v1/sessions/{sid}/ports/8090:presign", json={})
    sessions_before = [s["id"] for s in (await console.api("GET", "/v1/sessions"))["sessions"]]
    guest = await console.page.context.new_page()
    await guest.goto(link["url"] + "index.html#" + console.base)
    result = await guest.wait_for_function("() => document.body && document.body.dataset.result")
    seen = json.loads(await result.json_value())
    assert seen["origin"] == "null"  # sandboxed: an opaque origin, never the console's
    assert seen["cookie"] in ("", "denied") and seen["storage"] == "denied"
    assert {seen["read"], seen["write"], seen["token"]} <= {"blocked", 401, 403, 405}, seen
    assert [s["id"] for s in (await console.api("GET", "/v1/sessions"))["sessions"]] == sessions_before



# -- the pages as a user meets them: no errors, the session's facts, its controls, shortcuts ---------

DOC_SHOTS = 1280, 800
"""The screenshots' size (kept under test-output/console/page-*.png; the docs' copies come from these)."""


async def page_shot(console: Console, name: str) -> None:
    await console.page.set_viewport_size({"width": DOC_SHOTS[0], "height": DOC_SHOTS[1]})
    await console.shot(f"page-{name}")


async def test_every_page_loads_with_no_console_error_nor_failed_request(tmp_path):
    async with open_console(tmp_path, sign_in=False) as console:
        page = console.page
        await page.wait_for_selector("#sign-in", state="visible")
        await page_shot(console, "sign-in")
        await page.fill("#key", console.key)
        await page.click("#sign-in-form button[type=submit]")
        await page.wait_for_selector('#view[data-ready="#/sessions"]', state="attached")
        sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
        await console.api("POST", "/v1/sessions", json={})
        files = {"analysis.py": b"import statistics\n\nscores = [3, 10, 7]\nprint(statistics.mean(scores))\n",
                 "data/scores.csv": b"name,score\nada,3\nbob,10\ncy,7\n", "chart.png": png(160, 100),
                 "README.md": b"# Analysis\n\nScores of the **quarter**.\n"}
        for path, data in files.items():
            await console.api("PUT", f"/v1/sessions/{sid}/files/{path}", data=data)
        await console.api("POST", f"/v1/sessions/{sid}/artifacts", json={"path": "chart.png", "note": "for the report"})
        await console.go("#/sessions")
        await page.wait_for_selector(f'tr[data-session="{sid}"]')
        await page_shot(console, "sessions")
        await console.open_file(sid, "analysis.py")
        await page.fill("textarea.cell", "import statistics\nprint(statistics.mean([3, 10, 7]))\n1/0")
        await page.click("button.run")
        await page.wait_for_function("() => document.querySelector('.cell-status').textContent.startsWith('exit')")
        output = await page.locator("pre.output").text_content()
        assert output.count("ZeroDivisionError: division by zero") == 1, output  # the error's line once
        await page_shot(console, "session")
        await console.open_file(sid, "README.md")  # Markdown is drawn as soon as the view is ready
        assert await page.frame_locator("iframe.preview").locator("h1").text_content() == "Analysis"
        await console.go("#/artifacts")
        await page.wait_for_selector("table.artifacts .artifact-name")
        await page_shot(console, "artifacts")
        await console.go(f"#/session/{sid}")
        await page.keyboard.press("?")
        await page.wait_for_selector("#help[open]")
        await page_shot(console, "shortcuts")
        await page.keyboard.press("Escape")
        await page.wait_for_selector("#help", state="hidden")
        # no stray bullet: nothing is drawn where the unopened terminal will be
        assert await page.locator(".terminal-screen").is_hidden()
        assert console.problems == []  # no 401 of a favicon, no failed call, no script error


async def test_the_session_page_shows_its_facts_and_switches_the_network_through_the_api(tmp_path):
    profiles = {"lab": {"language": "python", "network": {"mode": "deny", "session_max": {"mode": "open"}}},
                "closed": {"language": "python", "network": {"mode": "deny"}}}
    async with open_console(tmp_path, profiles=profiles) as console:
        page = console.page
        sid = (await console.api("POST", "/v1/sessions", json={"profile": "lab"}))["id"]
        await console.go(f"#/session/{sid}")
        assert await page.locator(".session-id").text_content() == sid
        assert await page.locator(".session-profile").text_content() == "lab"
        info = await console.api("GET", f"/v1/sessions/{sid}")
        assert await page.locator(".session-state").text_content() == info["state"]
        assert "off" in await page.locator(".session-network").text_content()
        assert info["egress"]["mode"] == "deny"

        await page.select_option("select.network-switch", "open")  # on, as the work needs it
        await page.wait_for_selector('.session-bar[data-egress="open"]', state="attached")
        assert (await console.api("GET", f"/v1/sessions/{sid}"))["egress"]["mode"] == "open"
        assert "public internet" in await page.locator(".session-network").text_content()
        await page.select_option("select.network-switch", "profile")  # back to the profile's policy
        await page.wait_for_selector('.session-bar[data-egress="deny"]', state="attached")
        assert (await console.api("GET", f"/v1/sessions/{sid}"))["egress"]["mode"] == "deny"

        # a profile that does not allow it: the refusal is shown and the policy stays
        closed = (await console.api("POST", "/v1/sessions", json={"profile": "closed"}))["id"]
        await console.go(f"#/session/{closed}")
        await page.select_option("select.network-switch", "open")
        await page.wait_for_function("() => document.querySelector('.network-error').textContent !== ''")
        assert "network_not_allowed" in await page.locator(".network-error").text_content()
        assert await page.locator("select.network-switch").input_value() == "deny"
        assert (await console.api("GET", f"/v1/sessions/{closed}"))["egress"]["mode"] == "deny"
        assert [p for p in console.problems if "403 PATCH" not in p and "status of 403" not in p] == []


async def test_the_delete_button_asks_then_deletes_the_session(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    page = console.page
    await console.go(f"#/session/{sid}")
    await page.click("button.delete-session")
    await page.click("dialog.confirm button.confirm-cancel")  # a change of mind keeps it
    assert (await console.api("GET", f"/v1/sessions/{sid}"))["id"] == sid
    await page.click("button.delete-session")
    await page.click("dialog.confirm button.confirm-ok")
    await page.wait_for_selector('#view[data-ready="#/sessions"]', state="attached")
    async with console.client.get(f"/v1/sessions/{sid}", headers={"Authorization": f"Bearer {console.key}"}) as r:
        assert r.status == 404
    assert await page.locator(f'tr[data-session="{sid}"]').count() == 0


async def test_ctrl_enter_runs_the_cell_and_the_side_panels_list_processes_and_packages(console):
    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    page = console.page
    await console.go(f"#/session/{sid}")
    assert "No background processes" in await page.locator(".processes").text_content()
    assert "No packages installed" in await page.locator(".packages").text_content()
    await page.fill("textarea.cell", "print('from the keyboard', 6 * 7)")
    await page.keyboard.press("Control+Enter")
    await page.wait_for_function("() => document.querySelector('.cell-status').textContent.startsWith('exit 0')")
    assert await page.locator("pre.output").text_content() == "from the keyboard 42\n"
    await page.click("button.fork-session")
    fork = page.locator("a.fork-link")
    await fork.wait_for()
    child = await fork.text_content()
    assert (await console.api("GET", f"/v1/sessions/{child}"))["id"] == child


@needs_sandbox
async def test_a_running_server_is_listed_with_a_preview_link_on_an_origin_of_its_own(console):
    from urllib.parse import urlsplit

    from server_helpers import eventually

    sid = (await console.api("POST", "/v1/sessions", json={}))["id"]
    await console.api("PUT", f"/v1/sessions/{sid}/files/site/index.html", data=b"<h1>served</h1>")
    process = await console.api("POST", f"/v1/sessions/{sid}/processes", json={
        "command": ["python3", "-m", "http.server", "8091", "--bind", "127.0.0.1"], "cwd": "site"})

    async def listening() -> bool:
        info = await console.api("GET", f"/v1/sessions/{sid}/processes/{process['id']}")
        return 8091 in info.get("ports", [])

    await eventually(listening, timeout=15, interval=0.05)
    page = console.page
    await console.go(f"#/session/{sid}")
    row = page.locator(f'.processes li[data-process="{process["id"]}"]')
    assert await row.locator(".badge").text_content() == "running"
    await row.locator('button.preview-open[data-port="8091"]').click()
    link = row.locator("a.preview-link")
    await link.wait_for()
    href = await link.get_attribute("href")
    assert urlsplit(href).scheme == "http" and urlsplit(href).netloc != urlsplit(console.base).netloc
    assert await link.get_attribute("rel") == "noopener noreferrer"
    assert console.problems == []


async def test_a_new_session_starts_from_a_web_starter_chosen_on_the_sessions_page(console):
    page = console.page
    await console.go("#/sessions")
    options = await page.locator("#start-from option").evaluate_all("os => os.map(o => o.value)")
    installed = [s["name"] for s in (await console.api("GET", "/v1/starters"))["starters"] if s["ready"]]
    assert options == ["", *installed] and "vite-react" in installed
    await page.select_option("#start-from", "vite-react")
    await page.click("#new-session")
    await page.wait_for_function("() => (document.getElementById('view').dataset.ready || '').startsWith('#/session/')")
    sid = page.url.split("#/session/")[1]
    listing = await console.api("GET", f"/v1/sessions/{sid}/files?recursive=true")
    assert {"package.json", "src/App.tsx"} <= {e["path"] for e in listing["entries"]}
    assert console.problems == []


async def test_the_team_page_sets_roles_and_makes_roles_and_the_usage_page_shows_what_was_used(tmp_path):
    store = TenantStore.in_data_dir(tmp_path / "data")
    keys = {name: store.create_key("alpha", name, "member", name)[0] for name in ("olga", "bob", "carol")}
    store.roles.set_member("alpha", "olga", "owner")
    store.close()
    async with open_console(tmp_path, sign_in=False) as console:
        page = console.page

        async def sign_in(name: str) -> None:
            await page.fill("#key", keys[name])
            await page.click("#sign-in-form button[type=submit]")
            await page.wait_for_selector('#view[data-ready="#/sessions"]', state="attached")

        async def call(name: str, method: str, path: str, **kwargs: Any) -> Any:
            async with console.client.request(method, path, headers={"Authorization": f"Bearer {keys[name]}"},
                                              **kwargs) as answer:
                assert answer.status < 400, await answer.text()
                return await answer.json()

        await sign_in("olga")
        sid = (await call("olga", "POST", "/v1/sessions", json={}))["id"]
        await call("olga", "POST", f"/v1/sessions/{sid}/exec", json={"code": "print(1)"})
        await console.go("#/team")
        assert await page.locator('tr[data-member="olga"] select').input_value() == "owner"
        await page.select_option('tr[data-member="bob"] select', "admin")  # set through the API, audited there
        await page.wait_for_function("""() => document.querySelector('tr[data-member="bob"] select')?.value === 'admin'
            && document.getElementById('view').dataset.ready""")
        members = {m["member"]: m["role"] for m in (await call("olga", "GET", "/v1/admin/members"))["members"]}
        assert members["bob"] == "admin"
        await page.fill("#role-name", "auditor")
        await page.check('#role-create input[value="audit.read"]')
        await page.click("#role-create button[type=submit]")
        await page.wait_for_selector('tr[data-role="auditor"]')
        assert "audit.read" in await page.locator('tr[data-role="auditor"] td.permissions').text_content()
        await page_shot(console, "team")
        await page.click('tr[data-role="auditor"] button.delete-role')
        await page.wait_for_selector('tr[data-role="auditor"]', state="detached")

        for _ in range(50):  # usage is written every second ([auth.usage] flush_interval_s)
            await console.go("#/usage")
            if await page.locator('tr[data-unit="executions"]').count():
                break
            await page.wait_for_timeout(200)
        assert await page.locator('tr[data-unit="executions"] td.num').text_content() == "1"
        await page_shot(console, "usage")
        async with page.expect_download() as download:
            await page.click("#usage-csv")
        csv = Path(await (await download.value).path()).read_text()
        assert csv.splitlines()[0].startswith("workspace,") and ",executions,1" in csv, csv

        await page.click("#sign-out")  # a member without members.read is told why the team page is empty
        await page.wait_for_selector("#sign-in", state="visible")
        await sign_in("carol")
        await console.go("#/team")
        assert "members.read" in await page.locator("#team-refused").text_content()
        await console.go("#/usage")  # her own usage: none yet
        assert await page.locator('tr[data-unit="executions"]').count() == 0
