"""A session made from a web starter runs the starter's dev server at once: no install, the network
off, the page served through a preview link; and the shared node_modules stay out of its reach."""

from __future__ import annotations

import re
import time

import aiohttp
import pytest
from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, new_session, preview_of, start
from server_helpers import eventually

from wasm_runner.providers.native.web_starters import find_starter

pytestmark = NATIVE_ROOT_SERVICE

DEV_MEMORY = 1 << 30
"""A dev server holds Vite, its bundler and the app's modules in memory."""


@pytest.fixture
async def secure(start_secure):
    return await start_secure(**SECTIONS)


async def _serve_starter(secure, starter: str, port: int, module: str) -> tuple[str, str]:
    """Create a session from `starter`, run `npm run dev` in it; (session id, the page's HTML). The
    app's `module` and every module it imports load too (the browser's next requests)."""
    assert find_starter(starter) is not None, "run `wasm-runner prepare`: it installs the web starters"
    began = time.monotonic()
    sid = await new_session(secure, starter=starter, egress={"mode": "deny"})  # any install would fail
    status, info, _ = await secure.call("GET", f"/v1/sessions/{sid}", "a_member")
    assert status == 200 and info.get("egress", {}).get("mode", "deny") == "deny", info
    process = await start(secure, sid, command=["npm", "run", "dev"], name="dev", memory_bytes=DEV_MEMORY)

    async def listening() -> bool:
        _, state, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{process['id']}", "a_member")
        if state["state"] not in ("starting", "running"):
            url = f"/v1/sessions/{sid}/processes/{process['id']}/output?stream=stderr"
            _, output, _ = await secure.call("GET", url, "a_member")
            raise AssertionError(f"the dev server ended: {state} {output}")
        return port in state.get("ports", [])

    await eventually(listening, timeout=120, interval=0.1)
    preview = await preview_of(secure, sid, port)
    async with aiohttp.ClientSession(headers=preview.headers()) as http, http.get(preview.base + "/") as response:
        html = await response.text()
        assert response.status == 200, html
        async with http.get(preview.base + module) as response:
            code = await response.text()
            assert response.status == 200 and "javascript" in response.content_type, code
        imports = re.findall(r'from "(/[^"]+)"', code)
        assert imports, code  # react, its JSX runtime, the app's own modules: pre-bundled or transformed
        for path in imports:
            async with http.get(preview.base + path) as response:
                assert response.status == 200, (path, await response.text())
    print(f"{starter}: {time.monotonic() - began:.1f} s from the call to a served page")
    return sid, html


async def test_a_vite_react_starter_serves_its_page_through_a_preview_with_no_install(secure) -> None:
    _, html = await _serve_starter(secure, "vite-react", 5173, "/src/main.tsx")
    assert '<div id="root"></div>' in html and "/src/main.tsx" in html and "/@vite/client" in html


async def test_a_tanstack_start_starter_renders_its_route_on_the_server_with_no_install(secure) -> None:
    _, html = await _serve_starter(secure, "tanstack-start", 3000, "/src/routes/index.tsx")
    assert "<h1>TanStack Start</h1>" in html and "<title>TanStack Start</title>" in html  # rendered by the SSR


async def test_the_shared_node_modules_are_read_only_to_the_session(secure) -> None:
    sid = await new_session(secure, starter="vite-react")
    status, done, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={
        "language": "bash",
        "code": "echo evil > node_modules/vite/package.json; echo rc=$?; touch node_modules/new; echo rc=$?;"
                " rm -rf node_modules/react; ls node_modules/react/package.json"})
    assert status == 200, done
    assert done["stdout"].count("rc=1") == 2 and "node_modules/react/package.json" in done["stdout"], done
    installed = find_starter("vite-react")
    assert installed is not None
    assert b"evil" not in (installed.path / "node_modules" / "vite" / "package.json").read_bytes()


async def test_an_unknown_starter_or_a_starter_with_a_template_is_refused_and_leaves_no_session(secure) -> None:
    for body, words in (({"starter": "rails"}, "vite-react"),
                        ({"starter": "vite-react", "template": "t"}, "not both")):
        status, data, _ = await secure.call("POST", "/v1/sessions", "a_member", json=body)
        assert status == 422 and words in str(data), data
    _, listing, _ = await secure.call("GET", "/v1/sessions", "a_member")
    assert listing["sessions"] == []
