"""A workspace's concurrent executions counted across the cluster (`auth.quotas.concurrent_executions`):
a slot taken through one node is taken on all; a dead node's slots stop counting once they lapse."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import psycopg
from service_process import serving

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.metadata import postgres
from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.security import stores
from wasm_runner_server.security.running_pg import SharedRunning


def _running(url: str, node: str) -> SharedRunning:
    return SharedRunning(postgres.acquire(StoreSettings(url=url)), node)


def test_the_last_slot_is_taken_once_and_a_dead_nodes_slots_lapse(postgres_url):
    a, b = _running(postgres_url, "node-a"), _running(postgres_url, "node-b")
    try:
        first = a.acquire("team", 2)
        assert first is not None and b.acquire("team", 2) is not None
        assert a.acquire("team", 2) is None and b.acquire("team", 2) is None  # the workspace's two, on any node
        assert b.acquire("other", 2) is not None  # another workspace counts apart
        a.release(first)
        assert b.acquire("team", 2) is not None
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # as if node-b had stopped renewing
            conn.execute("UPDATE running_executions SET expires_at = expires_at - 3600 WHERE node = 'node-b'")
        a.renew()  # renews node-a's (none) and deletes the lapsed
        assert a.acquire("team", 2) is not None and a.acquire("team", 2) is not None
        assert a.acquire("team", 2) is None
        restarted = _running(postgres_url, "node-a")  # a node that starts again drops its earlier life's slots
        assert restarted.acquire("team", 2) is not None
        restarted.close()
    finally:
        a.close()
        b.close()


async def test_a_workspace_runs_its_maximum_at_once_across_nodes(postgres_url, tmp_path: Path):
    nodes = []
    for name in ("node-a", "node-b"):
        config = tmp_path / f"{name}.toml"
        config.write_text(f'[store]\nurl = "{postgres_url}"\nnode = "{name}"\n[server]\nprepare_on_start = false\n'
                          "[auth.quotas]\nconcurrent_executions = 1\n")
        nodes.append((tmp_path / name, config))
    async with contextlib.AsyncExitStack() as stack:
        (_, url_a), (_, url_b) = await asyncio.gather(*(stack.enter_async_context(serving(d, config=c))
                                                        for d, c in nodes))
        config = ServiceConfig.model_validate({"server": {"data_dir": str(nodes[0][0])},
                                               "store": {"url": postgres_url}})
        tenants = stores.tenant_store(config, nodes[0][0])
        auth = {"Authorization": f"Bearer {tenants.create_key('team', 'dev', 'member')[0]}"}
        tenants.close()
        async with httpx.AsyncClient(timeout=120) as http:
            long_run = asyncio.create_task(http.post(f"{url_a}/v1/exec", headers=auth,
                                                     json={"code": "import time\ntime.sleep(3)\nprint('done')"}))
            for _ in range(200):  # until node-a's execution has taken the workspace's one slot
                with psycopg.connect(postgres_url) as conn:
                    row = conn.execute("SELECT node FROM running_executions WHERE workspace = 'team'").fetchone()
                if row is not None:
                    break
                await asyncio.sleep(0.02)
            assert row == ("node-a",)
            busy = await http.post(f"{url_b}/v1/exec", headers=auth, json={"code": "print(1)"})
            assert busy.status_code == 429, busy.text
            assert busy.json()["error"]["code"] == "workspace_busy" and busy.headers["Retry-After"]
            done = await long_run
            assert done.status_code == 200 and done.json()["stdout"] == "done\n", done.text
            after = await http.post(f"{url_b}/v1/exec", headers=auth, json={"code": "print(1)"})
            assert after.status_code == 200 and after.json()["stdout"] == "1\n", after.text
