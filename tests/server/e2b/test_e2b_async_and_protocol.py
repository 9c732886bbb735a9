"""The async SDK classes speak the same protocol; and what the gateway does not answer, it refuses in
the protocol's own terms (the SDK raises a typed error, never hangs)."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox
from e2b.exceptions import SandboxException
from e2b_code_interpreter import AsyncSandbox as AsyncCodeSandbox

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_the_async_sdk_creates_writes_runs_and_kills(e2b_service):
    async def scenario() -> tuple[str, str, str | None]:
        sandbox = await AsyncCodeSandbox.create()
        try:
            await sandbox.files.write("/home/user/async.txt", "from the async SDK")
            command = await sandbox.commands.run("cat async.txt")
            execution = await sandbox.run_code("len(open('async.txt').read())")
            read = await sandbox.files.read("async.txt")
            return command.stdout, read, execution.text
        finally:
            await sandbox.kill()

    stdout, read, text = asyncio.run(scenario())
    assert stdout == read == "from the async SDK" and text == "18"

    async def listed() -> list[str]:
        return [s.sandbox_id for s in await AsyncSandbox.list().next_items()]

    assert asyncio.run(listed()) == []


def test_unanswered_methods_are_refused_as_unimplemented(e2b_service):
    sandbox = Sandbox.create()
    try:
        with pytest.raises(Exception, match="not supported by this server"):
            sandbox.files.watch_dir("/workspace")
        with pytest.raises(Exception, match="not supported by this server"):
            sandbox.pty.resize(1, size=__import__("e2b").PtySize(rows=10, cols=10))
    finally:
        sandbox.kill()


def test_malformed_rpc_bodies_get_connect_errors(e2b_service):
    sandbox = Sandbox.create()
    try:
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": e2b_service.keys["alpha"]}
        url = f"{e2b_service.sandbox_url}/filesystem.Filesystem/Stat"
        not_json = httpx.post(url, content=b"{", headers={**headers, "Content-Type": "application/json"})
        assert not_json.status_code == 400 and not_json.json()["code"] == "invalid_argument"
        binary = httpx.post(url, content=b"\x0a\x01a", headers={**headers, "Content-Type": "application/proto"})
        assert binary.status_code == 501 and "JSON codec" in binary.json()["message"]
        too_big = httpx.post(url, content=b'{"path": "' + b"a" * (5 * 1024 * 1024) + b'"}',
                             headers={**headers, "Content-Type": "application/json"})
        assert too_big.status_code == 429 and too_big.json()["code"] == "resource_exhausted"
        start = f"{e2b_service.sandbox_url}/process.Process/Start"
        bad_envelope = httpx.post(start, content=b"\x00\x00\x00\x00\xff{}",
                                  headers={**headers, "Content-Type": "application/connect+json"})
        assert bad_envelope.status_code == 200  # a stream's errors travel in its end message
        assert b'"code":"invalid_argument"' in bad_envelope.content
        rpc = e2b_service.sandbox_url
        for method, message in (("process.Process/SendSignal", {"process": {"pid": "1/../../x"}}),
                                ("process.Process/SendSignal", {"process": {"pid": [1]}}),
                                ("process.Process/SendInput", {"process": "p1", "input": {}}),
                                ("process.Process/SendInput", {"process": {"pid": 1}, "input": {"stdin": 5}}),
                                ("filesystem.Filesystem/ListDir", {"path": "/workspace", "depth": "deep"}),
                                ("filesystem.Filesystem/ListDir", {"path": ["/workspace"]})):
            answer = httpx.post(f"{rpc}/{method}", json=message, headers=headers)
            assert answer.status_code in (400, 404) and answer.json()["code"] in ("invalid_argument", "not_found"), \
                (method, message, answer.text)
        control = httpx.post(f"{e2b_service.api_url}/v2/sandboxes/{sandbox.sandbox_id}/connect",
                             json={"timeout": "soon"}, headers={"X-API-Key": e2b_service.keys["alpha"]})
        assert control.status_code == 400 and "timeout" in control.json()["message"]
        contexts = httpx.post(f"{rpc}/contexts", json=["python"], headers=headers)
        assert contexts.status_code == 400
    finally:
        sandbox.kill()


def test_sandbox_ids_that_try_to_leave_the_sessions_path_reach_nothing(e2b_service):
    """A sandbox id is put in the API's paths percent-encoded: it names a session or nothing."""
    admin_paths = ("../../admin/keys", "../v1/admin/keys", "x/../../../v1/audit", "%2e%2e%2fadmin")
    api_key = {"X-API-Key": e2b_service.keys["alpha"]}
    for sandbox_id in admin_paths:
        headers = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": e2b_service.keys["alpha"]}
        listing = httpx.post(f"{e2b_service.sandbox_url}/filesystem.Filesystem/ListDir", json={"path": ""},
                             headers=headers)
        assert listing.status_code == 503 and "was not found" in listing.json()["message"], listing.text
        info = httpx.get(f"{e2b_service.api_url}/sandboxes/{quote(sandbox_id, safe='')}", headers=api_key)
        assert info.status_code == 404, info.text


def test_control_plane_calls_not_answered_say_so(e2b_service):
    sandbox = Sandbox.create()
    try:
        with pytest.raises(SandboxException, match="not supported by this server"):
            sandbox.get_metrics()
        with pytest.raises(SandboxException, match="not supported by this server"):
            sandbox.create_snapshot()
        assert sandbox.is_running()
    finally:
        sandbox.kill()
