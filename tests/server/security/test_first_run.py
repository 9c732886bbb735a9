"""First run: a start with no keys at all makes one admin key, shown once with the console's address."""

from __future__ import annotations

import re

from aiohttp.test_utils import TestClient, TestServer
from server_helpers import make_config

from wasm_runner_server.app import create_app
from wasm_runner_server.security.tenants import TenantStore


async def start(data_dir, **auth) -> TestClient:
    config = make_config(data_dir, auth={"enabled": True, **auth})
    client = TestClient(TestServer(create_app(config), host="127.0.0.1", port=0))
    await client.start_server()
    return client


async def test_no_keys_at_all_gives_one_admin_key_printed_once(tmp_path, capsys):
    client = await start(tmp_path, first_run_key=True)
    try:
        printed = capsys.readouterr().out
        keys = re.findall(r"wr_[0-9a-f]{12}_[A-Za-z0-9_-]+", printed)
        assert len(keys) == 1 and "/console/" in printed
        async with client.get("/v1/sessions", headers={"Authorization": f"Bearer {keys[0]}"}) as response:
            assert response.status == 200
        async with client.get("/v1/admin/keys", headers={"Authorization": f"Bearer {keys[0]}"}) as response:
            listed = (await response.json())["keys"]
            assert [(k["workspace"], k["kind"]) for k in listed] == [("local", "admin")]
    finally:
        await client.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("tenants.sqlite3*"))
    assert keys[0].encode() not in raw  # only its hash is stored
    again = await start(tmp_path, first_run_key=True)  # a key exists now: nothing new, nothing printed
    await again.close()
    assert "wr_" not in capsys.readouterr().out


async def test_the_setting_turns_it_off(tmp_path, capsys):
    client = await start(tmp_path, first_run_key=False)
    await client.close()
    assert "wr_" not in capsys.readouterr().out
    store = TenantStore.in_data_dir(tmp_path)
    try:
        assert store.keys() == []
    finally:
        store.close()
