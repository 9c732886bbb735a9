"""`wasm-runner usage report|budgets` and `sessions create --temporary` against the real service in its own
process, as a user types them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from service_process import serving
from test_service_cli_session_commands import wasm_runner

from wasm_runner_server.security.tenants import TenantStore


@pytest.fixture
async def service(tmp_path: Path):
    data_dir = tmp_path / "data"
    tenants = TenantStore.in_data_dir(data_dir)
    member, _ = tenants.create_key("team", "cli", "member")
    admin, _ = tenants.create_key("ops", "root", "admin")
    tenants.close()
    async with serving(data_dir) as (_, url):
        yield url, member, admin


async def test_usage_report_csv_and_a_budget_set_from_the_command_line(service):
    url, member, admin = service
    code, sid, err = await wasm_runner("sessions", "create", "--temporary", url=url, key=member)
    assert code == 0, err
    sid = sid.strip()
    code, out, err = await wasm_runner("exec", sid, "-c", "print(6 * 7)", url=url, key=member)
    assert (code, out) == (0, "42\n"), err
    code, out, err = await wasm_runner("usage", "report", "--group-by", "unit", "--json", url=url, key=member)
    assert code == 0, err
    amounts = {e["unit"]: e["amount"] for e in json.loads(out)["entries"]}
    assert amounts["executions"] == 1 and amounts["wall_seconds"] > 0
    code, out, err = await wasm_runner("usage", "report", "--csv", "--unit", "executions", url=url, key=member)
    lines = out.splitlines()
    assert code == 0 and lines[0] == "workspace,day,unit,amount" and lines[1].endswith(",executions,1.0")
    code, out, err = await wasm_runner("usage", "budgets", "team", "--set", "executions=1", url=url, key=member)
    assert code == 77, (out, err)  # not an admin key
    code, out, err = await wasm_runner("usage", "budgets", "team", "--set", "executions=1", url=url, key=admin)
    assert code == 0, err
    assert "executions" in out and "workspace" in out
    code, out, err = await wasm_runner("exec", sid, "-c", "print(1)", url=url, key=member)
    assert code == 65 and "budget" in err and "1 executions" in err, (code, out, err)
    code, out, err = await wasm_runner("usage", "budgets", "team", "--unset", "executions", "--json", url=url,
                                       key=admin)
    assert code == 0 and json.loads(out)["budgets"] == [], out
