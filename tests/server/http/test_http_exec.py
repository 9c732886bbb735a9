"""Execution over HTTP: one-shot with files in and out, in-session by path, streaming,
cancellation by disconnect, backpressure, limits and profiles."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time

import aiohttp
import pytest
from server_helpers import assert_error_shape, call, eventually, new_session, run

from wasm_runner.providers.native import find_js_toolchain
from wasm_runner.providers.native.bwrap import find_bwrap

NEEDS_BWRAP = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (scripts/install-native.sh installs it as root)")

pytestmark = pytest.mark.asyncio


async def test_one_shot_print(client):
    status, result = await call(client, "POST", "/v1/exec", json={"code": "print(1 + 1)"})
    assert status == 200
    assert result["stdout"] == "2\n" and result["exit_code"] == 0 and result["duration_ms"] > 0
    assert result["output_files"] == {} and result["language"] == "python" and result["isolation"] == "wasm"


async def test_one_shot_takes_files_in_and_returns_output_files(client):
    png = bytes([0x89, 0x50, 0x4E, 0x47, 0, 1, 2, 255])
    code = (
        "data = open('in/data.csv').read().splitlines()\n"
        "raw = open('img.bin', 'rb').read()\n"
        "open('output.png', 'wb').write(raw[::-1])\n"
        "import os; os.makedirs('out', exist_ok=True)\n"
        "for i in range(2): open(f'out/r{i}.txt', 'w').write(str(len(data) + i))\n"
        "print(len(data), len(raw))"
    )
    status, result = await call(client, "POST", "/v1/exec", json={
        "code": code,
        "files": {"in/data.csv": "a,b\n1,2\n3,4\n", "img.bin": {"base64": base64.b64encode(png).decode()}},
        "output_files": ["output.png", "out/*.txt", "missing.txt"],
    })
    assert status == 200, result
    assert result["stdout"] == "3 8\n" and result["exit_code"] == 0
    out = result["output_files"]
    assert out["output.png"]["encoding"] == "base64"
    assert base64.b64decode(out["output.png"]["content"]) == png[::-1]
    assert out["out/r0.txt"] == {"size": 1, "encoding": "utf-8", "content": "3"}
    assert out["out/r1.txt"]["content"] == "4"
    assert result["missing_outputs"] == ["missing.txt"]


async def test_one_shot_runs_a_file_by_path_and_leaves_nothing_behind(client, tmp_path):
    status, result = await call(client, "POST", "/v1/exec", json={
        "path": "main.py", "files": {"main.py": "import sys\nprint('hi', sys.argv[0] if sys.argv else '')"}})
    assert status == 200 and result["stdout"].startswith("hi")

    async def cleaned() -> bool:
        sessions = tmp_path / "data" / "sessions"
        return not any(p.name.startswith("oneshot-") for p in sessions.iterdir()) if sessions.exists() else True

    await eventually(cleaned)


async def test_exec_by_path_in_a_session(client):
    sid = await new_session(client)
    async with client.put(f"/v1/sessions/{sid}/files/tools/job.py", data=b"value = 6 * 7\nprint(value)\n"):
        pass
    result = await run(client, sid, None, path="tools/job.py")
    assert result["stdout"] == "42\n"
    assert (await run(client, sid, "value"))["value"] == "42"  # ran in the kernel
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/exec", json={"path": "../etc/passwd"})
    assert status == 403
    assert_error_shape(data, "path_escape")
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/exec", json={"path": "nope.py"})
    assert status == 404
    assert_error_shape(data, "file_not_found")


async def test_typescript_runs_in_a_session_and_keeps_its_state(client):
    sid = await new_session(client)
    first = await run(client, sid, "interface P { n: number }\nconst p: P = { n: 41 };", language="typescript")
    assert first["error"] is None and first["language"] == "typescript"
    assert (await run(client, sid, "p.n + 1", language="typescript"))["value"] == "42"
    async with client.put(f"/v1/sessions/{sid}/files/job.ts", data=b"const x: number = 2;\nconsole.log(x);\n"):
        pass
    assert (await run(client, sid, None, path="job.ts"))["stdout"] == "2\n"  # the extension names the language


@pytest.mark.skipif(find_js_toolchain() is None or find_bwrap() is None,
                    reason="typecheck needs bubblewrap (sandbox) and the JavaScript toolchain (wasm-runner prepare)")
async def test_one_shot_typecheck_returns_the_diagnostics_with_the_result(client):
    code = "const n: number = 'two';\nconsole.log(n);\n"
    status, data = await call(client, "POST", "/v1/exec", json={"code": code, "language": "typescript",
                                                                "typecheck": True})
    assert status == 200, data
    assert data["stdout"] == "two\n"
    assert [(d["file"], d["line"], d["code"]) for d in data["diagnostics"]] == [("<input>", 1, 2322)]
    status, data = await call(client, "POST", "/v1/exec", json={"code": code, "language": "typescript",
                                                                "typecheck": "block"})
    assert status == 200, data
    assert data["stdout"] == "" and data["error"]["type"] == "TypeCheckError"
    assert data["exit_code"] == 1 and [d["code"] for d in data["diagnostics"]] == [2322]


async def test_typecheck_of_a_python_program_is_refused(client):
    sid = await new_session(client)
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/exec", json={"code": "1", "typecheck": True})
    assert status == 422
    assert_error_shape(data, "validation_error")


async def test_the_openapi_language_enum_has_typescript(client):
    status, spec = await call(client, "GET", "/openapi.json")
    assert status == 200
    language = spec["components"]["schemas"]["ExecBody"]["properties"]["language"]
    assert sorted(language["enum"]) == ["bash", "javascript", "python", "sh", "typescript"]
    assert {"typecheck", "typecheck_timeout_s"} <= set(spec["components"]["schemas"]["ExecBody"]["properties"])


async def _events(response: aiohttp.ClientResponse):
    """(event, data, arrival time) of a server-sent event stream."""
    event, data = None, []
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and event is not None:
            yield event, json.loads("\n".join(data)), time.monotonic()
            event, data = None, []


@pytest.mark.parametrize("where", ["session", "one-shot"])
async def test_streaming_delivers_output_before_the_run_ends(client, where):
    path = f"/v1/sessions/{await new_session(client)}/exec" if where == "session" else "/v1/exec"
    code = "import sys, time\nprint('first', flush=True)\ntime.sleep(0.6)\nprint('second', file=sys.stderr)"
    async with client.post(path, json={"code": code}, headers={"Accept": "text/event-stream"}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [e async for e in _events(response)]
    names = [name for name, _, _ in events]
    assert names[0] == "stdout" and events[0][1] == {"text": "first\n"}
    assert names[-1] == "result" and ("stderr", {"text": "second\n"}) in [(n, d) for n, d, _ in events]
    first_at, result_at = events[0][2], events[-1][2]
    assert result_at - first_at > 0.4  # the first line arrived while the guest was still sleeping
    result = events[-1][1]
    assert result["stdout"] == "first\n" and result["stderr"] == "second\n" and result["exit_code"] == 0


async def test_disconnecting_a_stream_stops_the_guest(client):
    sid = await new_session(client)
    session = aiohttp.ClientSession()
    try:
        ticking = "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)"
        response = await session.post(client.make_url(f"/v1/sessions/{sid}/exec"),
                                       json={"code": ticking, "limits": {"timeout_s": 60}},
                                       headers={"Accept": "text/event-stream"})
        await response.content.readline()  # it is running
        started = time.monotonic()
    finally:
        await session.close()  # the client goes away mid-run
    # The session is free again only once the guest stopped (calls queue per session).
    result = await run(client, sid, "print('after')")
    assert result["stdout"] == "after\n"
    assert time.monotonic() - started < 10


async def test_disconnecting_a_plain_request_stops_the_guest(client):
    sid = await new_session(client)
    session = aiohttp.ClientSession()
    try:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.post(client.make_url(f"/v1/sessions/{sid}/exec"),
                                                json={"code": "while True: pass", "limits": {"timeout_s": 60}}), 0.5)
    finally:
        await session.close()
    started = time.monotonic()
    result = await run(client, sid, "print('after')")
    assert result["stdout"] == "after\n" and time.monotonic() - started < 10, result["error"]


async def test_overload_answers_429_with_retry_after(serve):
    client = await serve(server={"concurrency": 1, "queue_size": 1, "queue_timeout_s": 5})
    slow = {"code": "import time\ntime.sleep(1)", "limits": {"timeout_s": 10}}
    tasks = [asyncio.create_task(client.post("/v1/exec", json=slow)) for _ in range(4)]
    responses = await asyncio.gather(*tasks)
    statuses = sorted(r.status for r in responses)
    rejected = [r for r in responses if r.status == 429]
    assert statuses.count(200) == 2 and len(rejected) == 2, statuses
    for response in rejected:
        assert int(response.headers["Retry-After"]) >= 1
        assert_error_shape(await response.json(), "overloaded")
    for response in responses:
        response.release()
    async with client.get("/metrics") as response:
        text = await response.text()
    assert 'wasm_runner_executions_total{language="python",mode="oneshot",outcome="rejected",limit=""} 2' in text


async def test_queue_wait_past_its_bound_is_429(serve):
    client = await serve(server={"concurrency": 1, "queue_size": 4, "queue_timeout_s": 0.2})
    slow = asyncio.create_task(call(client, "POST", "/v1/exec", json={"code": "import time\ntime.sleep(1)"}))
    await asyncio.sleep(0.2)
    status, data = await call(client, "POST", "/v1/exec", json={"code": "print(1)"})
    assert status == 429
    assert_error_shape(data, "overloaded")
    assert (await slow)[0] == 200


async def test_a_limit_hit_is_a_result_and_the_server_stays_up(client):
    status, result = await call(client, "POST", "/v1/exec", json={"code": "while True: pass", "limits": {"timeout_s": 0.3}})
    assert status == 200 and result["limit"] == "timeout" and result["exit_code"] != 0
    status, result = await call(client, "POST", "/v1/exec", json={"code": "print('x' * 5000)",
                                                                  "limits": {"output_bytes": 100}})
    assert status == 200 and result["limit"] == "output" and result["truncated"] == ["stdout"]
    assert (await call(client, "GET", "/healthz"))[0] == 200


async def test_limits_beyond_the_maximum_and_disallowed_env_are_refused(serve):
    client = await serve(
        limits={"max": {"timeout_s": 20}},
        profiles={"strict": {"language": "python", "env_allowlist": ["APP_*"], "env": {"FIXED": "1"},
                             "limits": {"timeout_s": 2}}})
    status, data = await call(client, "POST", "/v1/exec", json={"code": "1", "limits": {"timeout_s": 60}})
    assert status == 422
    assert_error_shape(data, "limit_exceeds_maximum")
    status, data = await call(client, "POST", "/v1/exec", json={"code": "1", "profile": "strict", "env": {"PATH": "/x"}})
    assert status == 422
    assert_error_shape(data, "env_not_allowed")
    status, result = await call(client, "POST", "/v1/exec", json={
        "code": "import os\nprint(os.environ['APP_MODE'], os.environ['FIXED'])", "profile": "strict",
        "env": {"APP_MODE": "test"}})
    assert status == 200 and result["stdout"] == "test 1\n"
    status, data = await call(client, "POST", "/v1/exec", json={"code": "1", "profile": "missing"})
    assert status == 422
    assert_error_shape(data, "unknown_profile")


async def test_profile_limits_apply_under_request_limits(serve):
    client = await serve(profiles={"quick": {"language": "python", "limits": {"timeout_s": 0.3}}})
    status, result = await call(client, "POST", "/v1/exec", json={"code": "while True: pass", "profile": "quick"})
    assert status == 200 and result["limit"] == "timeout"
    started = time.monotonic()
    status, result = await call(client, "POST", "/v1/exec", json={
        "code": "import time\ntime.sleep(0.5)\nprint('done')", "profile": "quick", "limits": {"timeout_s": 3}})
    assert status == 200 and result["stdout"] == "done\n" and time.monotonic() - started >= 0.5


@NEEDS_BWRAP
async def test_process_runs_natively(client):
    sid = await new_session(client)
    async with client.put(f"/v1/sessions/{sid}/files/hello.txt", data=b"hello"):
        pass
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/process", json={"command": ["cat", "hello.txt"]})
    assert status == 200, data
    assert data["stdout"] == "hello" and data["isolation"] == "bubblewrap"


@NEEDS_BWRAP
async def test_bash_language_goes_to_the_native_provider(client):
    status, data = await call(client, "POST", "/v1/exec", json={"language": "bash", "code": "echo $((6*7))"})
    assert status == 200, data
    assert data["stdout"] == "42\n"


async def test_javascript_session(client):
    sid = await new_session(client, profile="javascript")
    status, result = await call(client, "POST", f"/v1/sessions/{sid}/exec", json={"code": "let n = 20; n + 22"})
    assert status == 200, result
    assert result["language"] == "javascript" and result["exit_code"] == 0, result
    assert "42" in (result["value"] or result["stdout"])
