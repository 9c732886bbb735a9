"""Sessions over HTTP: lazy creation, listing, persistence of files and kernels, hibernation,
expiry and restart."""

from __future__ import annotations

import asyncio
import threading

import pytest
from server_helpers import assert_error_shape, call, eventually, new_session, run

from wasm_runner.providers.native.bwrap import find_bwrap
from wasm_runner.providers.native.toolchain import find_python_data
from wasm_runner_server.sessions.service import SERVICE

pytestmark = pytest.mark.asyncio


async def test_create_is_lazy_and_returns_the_session(client, tmp_path):
    status, data = await call(client, "POST", "/v1/sessions")
    assert status == 201
    assert data["state"] == "idle" and data["kernels"] == [] and data["profile"] == "python"
    assert data["idle_timeout_s"] == 600 and data["ttl_s"] == 86400
    assert not (tmp_path / "data" / "sessions" / data["id"]).exists()  # no directory until first use
    status, again = await call(client, "GET", f"/v1/sessions/{data['id']}")
    assert status == 200 and again["id"] == data["id"]


async def test_client_chosen_id_settings_and_conflict(client):
    status, data = await call(client, "POST", "/v1/sessions",
                              json={"id": "conv-42", "idle_timeout_s": 30, "ttl_s": 3600, "metadata": {"user": "u1"}})
    assert status == 201 and data["id"] == "conv-42" and data["idle_timeout_s"] == 30 and data["metadata"] == {"user": "u1"}
    status, data = await call(client, "POST", "/v1/sessions", json={"id": "conv-42"})
    assert status == 409
    assert_error_shape(data, "session_exists")


async def test_settings_beyond_server_maxima_are_refused(client):
    status, data = await call(client, "POST", "/v1/sessions", json={"ttl_s": 10 * 365 * 86400})
    assert status == 422
    assert_error_shape(data, "limit_exceeds_maximum")
    status, data = await call(client, "POST", "/v1/sessions", json={"profile": "nope"})
    assert status == 422
    assert_error_shape(data, "unknown_profile")


async def test_list_paginates_with_a_cursor(client):
    created = [await new_session(client) for _ in range(5)]
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        status, data = await call(client, "GET", "/v1/sessions", params=params)
        assert status == 200
        seen += [s["id"] for s in data["sessions"]]
        pages += 1
        cursor = data["next_cursor"]
        if cursor is None:
            break
    assert seen == created and pages == 3
    status, data = await call(client, "GET", "/v1/sessions", params={"cursor": "garbage!"})
    assert status == 400
    assert_error_shape(data, "invalid_cursor")


async def test_delete_removes_files_and_the_session(client, tmp_path):
    sid = await new_session(client)
    await run(client, sid, "open('f.txt', 'w').write('x')")
    assert (tmp_path / "data" / "sessions" / sid / "files" / "f.txt").exists()
    async with client.delete(f"/v1/sessions/{sid}") as response:
        assert response.status == 204
    assert not (tmp_path / "data" / "sessions" / sid).exists()
    status, data = await call(client, "GET", f"/v1/sessions/{sid}")
    assert status == 404
    assert_error_shape(data, "session_not_found")


async def test_files_persist_across_five_calls(client):
    sid = await new_session(client)
    for i in range(5):
        result = await run(client, sid, f"open('log.txt', 'a').write('{i}\\n')\nprint(open('log.txt').read().split())",
                           fresh=(i % 2 == 1))
        assert result["exit_code"] == 0, result
        assert result["stdout"].strip() == str([str(j) for j in range(i + 1)])
    async with client.get(f"/v1/sessions/{sid}/files/log.txt") as response:
        assert await response.text() == "0\n1\n2\n3\n4\n"


async def test_kernel_state_persists_across_calls(client):
    sid = await new_session(client)
    assert (await run(client, sid, "counter = 1"))["kernel_restarted"] is False
    for expected in (2, 3, 4):
        result = await run(client, sid, "counter += 1\ncounter")
        assert result["value"] == str(expected) and result["kernel_restarted"] is False
    status, info = await call(client, "GET", f"/v1/sessions/{sid}")
    assert info["state"] == "idle" and info["kernels"] == ["python"] and info["executions"] == 4


async def test_idle_kernel_hibernates_and_resumes_restored_with_files_intact(client):
    sid = await new_session(client, idle_timeout_s=0.3)
    await run(client, sid, "secret = 42\nopen('keep.txt', 'w').write('kept')")

    async def hibernated() -> bool:
        _, info = await call(client, "GET", f"/v1/sessions/{sid}")
        return info["state"] == "hibernated" and info["kernels"] == []

    await eventually(hibernated, timeout=10)
    result = await run(client, sid, "print(open('keep.txt').read())\nprint(secret)")
    assert result["kernel_restored"] is True and result["kernel_restarted"] is False
    assert result["stdout"].split() == ["kept", "42"]
    again = await run(client, sid, "1 + 1")
    assert again["kernel_restarted"] is False and again["value"] == "2"


async def test_session_expires_after_its_ttl_and_its_files_are_removed(client, tmp_path):
    sid = await new_session(client, ttl_s=8)  # the first call may wait for the worker processes to start
    await run(client, sid, "open('f.txt', 'w').write('x')")
    directory = tmp_path / "data" / "sessions" / sid
    assert directory.exists()

    async def gone() -> bool:
        status, _ = await call(client, "GET", f"/v1/sessions/{sid}")
        return status == 404 and not directory.exists()

    await eventually(gone, timeout=20)


async def test_sessions_files_and_kernels_survive_a_restart(serve, tmp_path):
    first = await serve()
    sid = await new_session(first)
    for i in range(5):
        await run(first, sid, f"open('n{i}.txt', 'w').write('{i}')\nstate = {i}")
    async with first.put(f"/v1/sessions/{sid}/files/dir/uploaded.bin", data=b"\x00\x01\x02") as response:
        assert response.status == 201
    await first.close()

    second = await serve()  # same data directory
    status, info = await call(second, "GET", f"/v1/sessions/{sid}")
    assert status == 200 and info["executions"] == 5 and info["state"] == "hibernated"
    result = await run(second, sid, "import os\nprint(sorted(os.listdir('.')))\nprint(state)")
    assert result["kernel_restored"] is True and result["kernel_restarted"] is False  # saved as the first stopped
    assert result["stdout"].splitlines() == [str(["dir", "n0.txt", "n1.txt", "n2.txt", "n3.txt", "n4.txt"]), "4"]
    async with second.get(f"/v1/sessions/{sid}/files/dir/uploaded.bin") as response:
        assert await response.read() == b"\x00\x01\x02"
    status, listing = await call(second, "GET", "/v1/sessions")
    assert [s["id"] for s in listing["sessions"]] == [sid]


async def test_the_sweep_writes_session_metadata_on_a_thread(client, monkeypatch):
    sessions = client.server.app[SERVICE].sessions
    writers: list[threading.Thread] = []
    save_many = sessions.store.save_many

    def recorded(rows):
        writers.append(threading.current_thread())
        save_many(rows)

    monkeypatch.setattr(sessions.store, "save_many", recorded)
    sid = await new_session(client)
    await run(client, sid, "x = 1")
    await sessions.sweep()
    assert writers and threading.current_thread() not in writers  # not the event loop's thread
    row = next(r for r in sessions.store.all() if r.id == sid)
    assert row.executions == 1 and row.kernels == ["python"]


async def test_calls_to_one_session_run_in_order(client):
    sid = await new_session(client)
    await run(client, sid, "order = []")
    calls = [call(client, "POST", f"/v1/sessions/{sid}/exec",
                  json={"code": f"import time\ntime.sleep(0.02)\norder.append({i})"}) for i in range(6)]
    tasks = []
    for c in calls:  # start them in a known order
        tasks.append(asyncio.create_task(c))
        await asyncio.sleep(0.005)
    assert all(status == 200 for status, _ in await asyncio.gather(*tasks))
    assert (await run(client, sid, "order"))["value"] == str(list(range(6)))


async def test_cancel_stops_the_running_execution(client):
    sid = await new_session(client)
    running = asyncio.create_task(call(client, "POST", f"/v1/sessions/{sid}/exec",
                                       json={"code": "while True: pass", "limits": {"timeout_s": 30}}))

    async def is_running() -> bool:
        _, info = await call(client, "GET", f"/v1/sessions/{sid}")
        return info["state"] == "active"

    await eventually(is_running)

    async def cancelled() -> bool:  # true once the execution has started and was stopped
        status, data = await call(client, "POST", f"/v1/sessions/{sid}/cancel")
        assert status == 200
        return data == {"cancelled": True}

    await eventually(cancelled)
    status, result = await asyncio.wait_for(running, 5)
    assert status == 200 and result["limit"] == "cancelled"
    after = await run(client, sid, "print('next')")
    assert after["stdout"] == "next\n"


needs_python_data = pytest.mark.skipif(
    find_bwrap() is None or find_python_data() is None,
    reason="needs bubblewrap and the python-data environment (wasm-runner prepare)")


@needs_python_data
async def test_a_python_data_session_keeps_a_dataframe_and_survives_hibernation(client):
    sid = await new_session(client, profile="python-data", idle_timeout_s=1.0)
    limits = {"timeout_s": 60}
    first = await run(client, sid, "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})\n"
                                   "df.to_csv('df.csv', index=False)", limits=limits)
    assert first["error"] is None, first["stderr"]
    await run(client, sid, "df['y'] = df.x * 2", limits=limits)
    third = await run(client, sid, "df", limits=limits)
    assert third["kernel_restarted"] is False and "<table" in third["outputs"][0]["data"]
    assert third["outputs"][0]["type"] == "text/html" and "y" in third["outputs"][0]["plain"]

    async def hibernated() -> bool:
        _, info = await call(client, "GET", f"/v1/sessions/{sid}")
        return info["state"] == "hibernated" and info["kernels"] == []

    await eventually(hibernated, timeout=15)
    resumed = await run(client, sid, "import pandas as pd\n(int(pd.read_csv('df.csv').x.sum()), 'df' in globals())",
                        limits=limits)
    assert resumed["kernel_restarted"] is True and resumed["value"] == "(6, False)"
