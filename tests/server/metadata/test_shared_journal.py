"""With `store.journal_dir` on a directory the nodes share, an audit row a node acknowledged and never
committed (it was killed with its writer behind) is found in PostgreSQL once another node replays the
dead node's journal: no one has to restart the dead node or run `wasm-runner audit replay`."""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg
from server_helpers import eventually
from service_process import serving

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.security import stores


def _node(tmp_path: Path, url: str, name: str, journals: Path) -> tuple[Path, Path]:
    config = tmp_path / f"{name}.toml"
    config.write_text(f'[store]\nurl = "{url}"\nnode = "{name}"\njournal_dir = "{journals}"\n'
                      "[server]\nprepare_on_start = false\n")
    return tmp_path / name, config


def _exec_rows(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT node, outcome FROM audit WHERE kind = 'exec' ORDER BY id").fetchall()


async def test_a_dead_nodes_journal_in_the_shared_directory_is_replayed_by_another_node(postgres_url, tmp_path):
    journals = tmp_path / "journals"
    dir_a, config_a = _node(tmp_path, postgres_url, "node-a", journals)
    dir_b, config_b = _node(tmp_path, postgres_url, "node-b", journals)
    config = ServiceConfig.model_validate({"server": {"data_dir": str(dir_a)}, "store": {"url": postgres_url}})
    tenants = stores.tenant_store(config, dir_a)
    key, _ = tenants.create_key("team", "dev", "member")
    tenants.close()
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=120) as http:
        async with serving(dir_a, slow_writer=True, config=config_a) as (proc_a, url_a):
            ran = await http.post(f"{url_a}/v1/exec", json={"code": "print(1)"}, headers=auth)
            assert ran.status_code == 200, ran.text  # acknowledged: in node-a's journal, not in the table
            assert (journals / "node-a.journal").stat().st_size > 0
            assert _exec_rows(postgres_url) == []
            proc_a.kill()
            await proc_a.wait()
        async with serving(dir_b, config=config_b):

            async def replayed() -> bool:
                return _exec_rows(postgres_url) == [("node-a", "ok")]

            await eventually(replayed, timeout=30)
            assert (journals / "node-a.journal").stat().st_size == 0  # cleared once its rows are stored
