"""The usage ledger's contract, on SQLite and on PostgreSQL: one running sum per (workspace, payer, day,
unit), queries by day, payer and unit with their filters, budgets, and the meter's storage samples."""

from __future__ import annotations

from datetime import date

import pytest

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.policy import Principal
from wasm_runner_server.security import stores
from wasm_runner_server.security.budgets import Budgets
from wasm_runner_server.security.metering import Meter
from wasm_runner_server.security.usage import Payer, UsageFilter, UsageLedger

DAY1 = 1_764_633_600.0  # 2025-12-02 00:00 UTC
DAY2 = DAY1 + 86400


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request, tmp_path):
    url = "sqlite" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    config = ServiceConfig.model_validate({"server": {"data_dir": str(tmp_path)}, "store": {"url": url}})
    now = [DAY2 + 60]
    opened = stores.usage_ledger(config, tmp_path)
    opened.clock = lambda: now[0]
    yield opened
    opened.close()


ALICE = Payer("alpha", "key", "alicekey0001", "member")
APP = Payer("alpha", "key", "appkey000001", "app")
BOB = Payer("beta", "key", "bobkey000001", "member")


def _rows(ledger: UsageLedger, filters: UsageFilter, group_by="day") -> set[tuple]:
    return {(r.workspace, r.day, r.payer_id, r.unit, r.amount) for r in ledger.query(filters, group_by)}


def test_amounts_sum_into_one_row_per_workspace_payer_day_and_unit(ledger):
    for _ in range(50):
        ledger.add(ALICE, "executions", 1, at=DAY1 + 10)
    ledger.flush()
    for _ in range(25):  # the same rows again, in a later flush: added to, not duplicated
        ledger.add(ALICE, "executions", 1, at=DAY1 + 20)
    ledger.add(ALICE, "executions", 2, at=DAY2 + 5)
    ledger.add(APP, "egress_bytes", 1000, at=DAY2 + 5)
    ledger.add(BOB, "cpu_seconds", 0.25, at=DAY2 + 5)
    assert _rows(ledger, UsageFilter(workspace="alpha")) == {
        ("alpha", "2025-12-02", None, "executions", 75.0), ("alpha", "2025-12-03", None, "executions", 2.0),
        ("alpha", "2025-12-03", None, "egress_bytes", 1000.0)}
    stored = ledger._db.rows("SELECT COUNT(*) FROM usage")  # noqa: SLF001 - the row count is the contract
    assert stored[0][0] == 4
    by_key = _rows(ledger, UsageFilter(workspace="alpha"), "key")
    assert by_key == {("alpha", None, "alicekey0001", "executions", 77.0),
                      ("alpha", None, "appkey000001", "egress_bytes", 1000.0)}
    assert _rows(ledger, UsageFilter(), "unit") == {
        ("alpha", None, None, "executions", 77.0), ("alpha", None, None, "egress_bytes", 1000.0),
        ("beta", None, None, "cpu_seconds", 0.25)}
    assert _rows(ledger, UsageFilter(workspace="alpha", key="appkey000001"), "unit") == {
        ("alpha", None, None, "egress_bytes", 1000.0)}
    assert _rows(ledger, UsageFilter(member="alicekey0001"), "unit") == {("alpha", None, None, "executions", 77.0)}
    assert _rows(ledger, UsageFilter(member="appkey000001"), "unit") == set()  # an app key is no member
    assert _rows(ledger, UsageFilter(workspace="alpha", since=date(2025, 12, 3), unit="executions")) == {
        ("alpha", "2025-12-03", None, "executions", 2.0)}
    assert _rows(ledger, UsageFilter(workspace="alpha", until=date(2025, 12, 2))) == {
        ("alpha", "2025-12-02", None, "executions", 75.0)}


def test_budgets_count_the_month_so_far_pending_amounts_included(ledger):
    ledger.add(ALICE, "executions", 3, at=DAY1 - 40 * 86400)  # last month: not counted
    ledger.add(ALICE, "executions", 4)
    budgets = Budgets(ledger, {"executions": 5})
    budgets.check("alpha")
    ledger.add(APP, "executions", 1)  # not flushed yet: still counted
    with pytest.raises(ApiError) as refused:
        budgets.check("alpha")
    assert refused.value.status == 402 and refused.value.code == "budget_exhausted"
    assert "used 5 executions since 2025-12-01" in refused.value.message
    budgets.set("alpha", "executions", 100)
    budgets.check("alpha")  # the workspace's own budget replaces the default
    assert budgets.of("alpha") == {"executions": 100} and budgets.of("beta") == {"executions": 5}
    budgets.set("alpha", "executions", None)
    assert budgets.of("alpha") == {"executions": 5}


def test_the_meter_samples_stored_bytes_into_byte_hours_and_counts_running_processes(ledger, tmp_path):
    now = [DAY2]
    meter = Meter(ledger, clock=lambda: now[0])
    session = tmp_path / "sessions" / "s1"
    session.mkdir(parents=True)
    owner = Principal("alpha", "alicekey0001", "member")
    meter.tick([(session, owner)], [])  # starts the clock: nothing counted yet
    (session / "data.bin").write_bytes(b"x" * 7200)
    meter.process_started("p1", owner, DAY2)
    now[0] = DAY2 + 1800  # half an hour
    meter.tick([(session, owner)], [("alpha", tmp_path / "missing")])
    now[0] = DAY2 + 2000
    meter.process_ended("p1", DAY2 + 2000, [])
    used = {r.unit: r.amount for r in ledger.query(UsageFilter(workspace="alpha"), "unit")}
    assert used == {"byte_hours": 3600.0, "process_seconds": 2000.0}
