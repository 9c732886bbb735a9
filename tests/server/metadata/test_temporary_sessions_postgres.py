"""A temporary session on a service whose metadata is in PostgreSQL: once it is deleted no row of any
table holds its code, its output or its id (and the usage it caused is still counted, under its key)."""

from __future__ import annotations

import secrets

import psycopg
from aiohttp.test_utils import TestClient, TestServer
from server_helpers import make_config

from wasm_runner_server.app import create_app
from wasm_runner_server.security import stores


def _rows_holding(url: str, *needles: str) -> list[str]:
    found = []
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").fetchall()]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"').fetchall():  # noqa: S608 - names from the catalog
                text = repr(row)
                found += [f"{table}: {n}" for n in needles if n in text]
    return found


async def test_no_row_holds_a_deleted_temporary_sessions_code_output_or_id(postgres_url, tmp_path):
    config = make_config(tmp_path / "data", auth={"enabled": True}, store={"url": postgres_url})
    tenants = stores.tenant_store(config, tmp_path / "data")
    key, _ = tenants.create_key("alpha", "member", "member")
    tenants.close()
    client = TestClient(TestServer(create_app(config), host="127.0.0.1", port=0))
    await client.start_server()
    auth = {"Authorization": f"Bearer {key}"}
    try:
        async with client.post("/v1/sessions", json={"temporary": True}, headers=auth) as response:
            assert response.status == 201
            sid = (await response.json())["id"]
        code_mark, out_mark = f"code-{secrets.token_hex(8)}", f"out-{secrets.token_hex(8)}"
        code = f"x = '{code_mark}'\nprint('{out_mark}')"
        async with client.post(f"/v1/sessions/{sid}/exec", json={"code": code}, headers=auth) as response:
            assert response.status == 200 and (await response.json())["stdout"] == out_mark + "\n"
        assert _rows_holding(postgres_url, sid, code_mark, out_mark) == []  # not even while it lives
        async with client.delete(f"/v1/sessions/{sid}", headers=auth) as response:
            assert response.status == 204
        async with client.get("/v1/usage", params={"group_by": "unit"}, headers=auth) as response:
            usage = {e["unit"]: e["amount"] for e in (await response.json())["entries"]}
        assert usage["executions"] == 1
        async with client.get("/v1/audit", params={"kind": "exec"}, headers=auth) as response:
            (row,) = (await response.json())["entries"]
        assert row["ephemeral"] and row["code"] is None and row["stdout"] is None
        assert _rows_holding(postgres_url, sid, code_mark, out_mark) == []
    finally:
        await client.close()
