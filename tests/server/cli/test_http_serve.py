"""`wasm-runner serve`: configuration precedence, structured logs, graceful shutdown."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from pydantic import ValidationError
from serve_in_loop import free_port, start_serving
from server_helpers import make_config

from wasm_runner_server.cli.commands import add_serve_command
from wasm_runner_server.cli.serve import build_config

ROOT = Path(__file__).resolve().parents[3]


def test_config_precedence_file_then_environment_then_flags(tmp_path):
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"server": {"port": 1111, "concurrency": 3, "host": "127.0.0.2"}}))
    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--config", str(config_file), "--port", "3333"])
    config = build_config(args, {"WASM_RUNNER_PORT": "2222", "WASM_RUNNER_CONCURRENCY": "5",
                                 "WASM_RUNNER_DATA_DIR": str(tmp_path / "d")})
    assert config.server.port == 3333 and config.server.concurrency == 5
    assert config.server.host == "127.0.0.2" and config.server.data_dir == tmp_path / "d"
    assert args.handler.__name__ == "run_serve"
    with pytest.raises(ValidationError):
        build_config(parser.parse_args(["serve", "--port", "99999"]), {})


@pytest.mark.asyncio
async def test_shutdown_lets_in_flight_executions_finish_and_flushes_state(tmp_path):
    config = make_config(tmp_path / "data", server={"port": free_port(), "shutdown_timeout_s": 10})
    task, stop, url = await start_serving(config)
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/v1/sessions", json={}) as response:
            sid = (await response.json())["id"]
        for _ in range(3):
            async with http.post(f"{url}/v1/sessions/{sid}/exec", json={"code": "print(1)"}) as response:
                assert response.status == 200
        slow = asyncio.create_task(http.post(f"{url}/v1/sessions/{sid}/exec",
                                             json={"code": "import time\ntime.sleep(0.8)\nprint('finished')"}))
        await asyncio.sleep(0.3)
        stop.set()  # as on SIGTERM
        response = await slow
        assert response.status == 200 and (await response.json())["stdout"] == "finished\n"
        response.release()
    await asyncio.wait_for(task, 20)
    # What was only in memory (use count, last use) was written out.
    task, stop, url = await start_serving(make_config(tmp_path / "data", server={"port": free_port()}))
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/v1/sessions/{sid}") as response:
                assert (await response.json())["executions"] == 4
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


@pytest.mark.asyncio
async def test_serving_keeps_what_start_up_built_out_of_garbage_collections(tmp_path):
    gc.unfreeze()
    task, stop, url = await start_serving(make_config(tmp_path / "data", server={"port": free_port()}))
    try:
        assert gc.get_freeze_count() > 10_000  # the modules, models and schemas loaded by then
    finally:
        gc.unfreeze()
        stop.set()
        await asyncio.wait_for(task, 20)


@pytest.mark.asyncio
async def test_shutdown_cancels_executions_past_the_bound(tmp_path):
    config = make_config(tmp_path / "data", server={"port": free_port(), "shutdown_timeout_s": 0.5})
    task, stop, url = await start_serving(config)
    async with aiohttp.ClientSession() as http:
        stuck = asyncio.create_task(http.post(url + "/v1/exec", json={"code": "while True: pass",
                                                                     "limits": {"timeout_s": 60}}))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        stop.set()
        await asyncio.wait_for(task, 20)
        assert time.monotonic() - started < 8
        try:
            response = await asyncio.wait_for(stuck, 5)
        except aiohttp.ClientError:
            return  # the connection was closed: also a bounded end
        body = await response.json()
        assert response.status == 200 and body["limit"] == "cancelled", body


@pytest.mark.asyncio
async def test_serve_command_logs_json_lines_and_stops_on_sigterm(tmp_path):
    port = free_port()
    env = {**os.environ, "WASM_RUNNER_DATA_DIR": str(tmp_path / "data"), "WASM_RUNNER_PORT": str(port)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "wasm_runner_server", "serve", "--host", "127.0.0.1", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    lines: list[dict] = []
    stray = b""
    try:
        while True:
            raw = await asyncio.wait_for(process.stderr.readline(), 60)
            assert raw, "the server exited early"
            if not raw.startswith(b"{"):  # not a log line: shown whole below, e.g. a traceback
                stray = raw
                break
            lines.append(json.loads(raw))
            if lines[-1].get("event") == "listening":
                break
        if not stray:
            assert lines[-1]["port"] == port
            # uvloop is a dependency wherever it builds (not on Windows); the line says which loop serves
            assert lines[-1]["event_loop"] == ("asyncio" if sys.platform == "win32" else "uvloop")
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                    assert response.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert not stray, "the server printed what is not a JSON line:\n" + (stray + stderr).decode(errors="replace")
    events = [json.loads(line).get("event") for line in (stderr or b"").splitlines() if line.startswith(b"{")]
    assert process.returncode == 0
    assert "request" in events and "shutting_down" in events and "stopped" in events
    for entry in lines:
        assert {"ts", "level", "logger", "msg"} <= set(entry)
