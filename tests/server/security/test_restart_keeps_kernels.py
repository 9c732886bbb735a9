"""Kernel state survives the service: a SIGTERM saves the kernels on the way down, an idle
hibernation saves them before a kill -9; the next call after the restart finds the variables
(Python and JavaScript) and says it restored them."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest
from service_process import serving

from wasm_runner_server.security.tenants import TenantStore

STATE = {"python": ("x = {'kept': 41}", "x['kept'] + 1"),
         "javascript": ("var x = {kept: 41};", "x.kept + 1")}


def key_for(data_dir: Path) -> dict[str, str]:
    tenants = TenantStore.in_data_dir(data_dir)
    key, _ = tenants.create_key("team", "restart", "member")
    tenants.close()
    return {"Authorization": f"Bearer {key}"}


async def exec_(http, url, sid, code, language) -> dict:
    async with http.post(f"{url}/v1/sessions/{sid}/exec", json={"code": code, "language": language}) as response:
        body = await response.json()
    assert response.status == 200, body
    return body


async def make_state(http, url, idle_timeout_s: float) -> str:
    async with http.post(url + "/v1/sessions", json={"idle_timeout_s": idle_timeout_s}) as response:
        assert response.status == 201, await response.text()
        sid = (await response.json())["id"]
    for language, (define, _) in STATE.items():
        assert (await exec_(http, url, sid, define, language))["exit_code"] == 0
    return sid


async def check_state(http, url, sid) -> None:
    for language, (_, read) in STATE.items():
        body = await exec_(http, url, sid, read, language)
        assert body["value"] == "42" and body["kernel_restored"] and not body["kernel_restarted"], body


@pytest.mark.asyncio
async def test_sigterm_saves_the_kernels_and_the_restarted_service_restores_them(tmp_path):
    data_dir = tmp_path / "data"
    headers = key_for(data_dir)
    async with serving(data_dir) as (process, url), aiohttp.ClientSession(headers=headers) as http:
        sid = await make_state(http, url, 3600)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 60) == 0
    async with serving(data_dir) as (_, url), aiohttp.ClientSession(headers=headers) as http:
        await check_state(http, url, sid)


@pytest.mark.asyncio
async def test_a_kill_after_hibernation_resumes_from_the_hibernation_snapshot(tmp_path):
    data_dir = tmp_path / "data"
    headers = key_for(data_dir)
    config = tmp_path / "config.toml"
    config.write_text("[sessions]\nsweep_interval_s = 0.2\n")
    async with serving(data_dir, config=config) as (process, url), aiohttp.ClientSession(headers=headers) as http:
        sid = await make_state(http, url, 1)
        deadline = time.monotonic() + 60
        while True:  # the idle sweep hibernates it (and saves its kernels)
            async with http.get(f"{url}/v1/sessions/{sid}") as response:
                if (await response.json())["state"] == "hibernated":
                    break
            assert time.monotonic() < deadline, "the session was never hibernated"
            await asyncio.sleep(0.2)
        kernel_dir = data_dir / "sessions"
        deadline = time.monotonic() + 30
        while len(list(kernel_dir.glob(f"*/{sid}/kernel/*.snap")) + list(kernel_dir.glob(f"{sid}/kernel/*.snap"))) < 2:
            assert time.monotonic() < deadline, "the kernels were not saved"
            await asyncio.sleep(0.1)
        process.kill()  # SIGKILL: nothing more is saved
        await process.wait()
    async with serving(data_dir, config=config) as (_, url), aiohttp.ClientSession(headers=headers) as http:
        await check_state(http, url, sid)
