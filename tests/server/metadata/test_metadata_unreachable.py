"""A node whose metadata database goes away answers 503 metadata_unavailable (retry), not 500."""

from __future__ import annotations

from postgres_server import postgres_server

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.security import stores


async def test_requests_get_503_while_the_database_is_down(serve, tmp_path):
    with postgres_server() as pg:  # a server of this test's own: it is stopped halfway
        url = pg.new_database()
        client = await serve(store={"url": url, "connect_timeout_s": 1}, auth={"enabled": True})
        config = ServiceConfig.model_validate({"server": {"data_dir": str(tmp_path / "data")}, "store": {"url": url}})
        tenants = stores.tenant_store(config, tmp_path / "data")
        key, _ = tenants.create_key("team", "dev")
        tenants.close()
        headers = {"Authorization": f"Bearer {key}"}
        assert (await client.get("/v1/sessions", headers=headers)).status == 200
    down = await client.get("/v1/sessions", headers=headers)
    assert down.status == 503
    assert down.headers["Retry-After"] == "1"
    error = (await down.json())["error"]
    assert error["code"] == "metadata_unavailable"
    assert pg.password not in await down.text()
