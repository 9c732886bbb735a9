"""Each metadata store's contract, on SQLite (the embedded default) and on PostgreSQL (a cluster's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psycopg
import pytest

from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.metadata import migrations
from wasm_runner_server.metadata import postgres as postgres_module
from wasm_runner_server.metadata.postgres import Postgres
from wasm_runner_server.metadata.settings import StoreSettings, redact
from wasm_runner_server.security import stores
from wasm_runner_server.security.audit import AuditFilter
from wasm_runner_server.sessions.open_store import session_store, store_settings
from wasm_runner_server.sessions.store import SessionRow

ROOT = Path(__file__).resolve().parents[3]


def _config(data_dir: Path, url: str, node: str | None = None) -> ServiceConfig:
    return ServiceConfig.model_validate({"server": {"data_dir": str(data_dir)}, "store": {"url": url, "node": node}})


@pytest.fixture(params=["sqlite", "postgresql"])
def config(request, tmp_path) -> ServiceConfig:
    url = "sqlite" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    return _config(tmp_path / "node-a", url, "node-a")


def _row(session_id: str, created_at: float) -> SessionRow:
    return SessionRow(id=session_id, profile="python", created_at=created_at, last_used_at=created_at,
                      idle_timeout_s=600, ttl_s=3600, metadata={"who": "test"})


def test_sessions_contract(config):
    store = session_store(config)
    try:
        assert store.insert(_row("a", 100.0))
        assert store.insert(_row("b", 101.0))
        assert not store.insert(_row("a", 102.0))  # the id is taken
        row = _row("a", 100.0)
        row.kernels, row.executions, row.last_used_at = ["python"], 3, 150.0
        store.save_many([row])
        store.set_egress("a", EgressPolicy(mode="allowlist", allow=["example.com"]))
        store.set_ttl("b", 7200)
        rows = {r.id: r for r in store.all()}
        assert rows["a"].kernels == ["python"] and rows["a"].executions == 3 and rows["a"].last_used_at == 150.0
        assert rows["a"].egress is not None and tuple(rows["a"].egress.allow) == ("example.com",)
        assert rows["a"].metadata == {"who": "test"}
        assert rows["b"].ttl_s == 7200 and rows["b"].expires_at == 101.0 + 7200
        assert store.page(None, 1) == ["a"]
        assert store.page((100.0, "a"), 10) == ["b"]
        assert store.elsewhere(["a", "b"]) == []  # both are this node's
        store.delete("a")
        assert [r.id for r in store.all()] == ["b"]
    finally:
        store.close()


def test_tenants_contract(config):
    tenants = stores.tenant_store(config, config.server.data_dir)
    try:
        key, record = tenants.create_key("team", "ci", "member")
        verified = tenants.verify(key)
        assert verified is not None and verified.id == record.id and verified.workspace == "team"
        active = tenants.active_key(record.id)
        assert active is not None and active.last_used_at is not None  # the check was noted
        assert tenants.verify(key[:-1] + ("x" if key[-1] != "x" else "y")) is None
        member_key, _ = tenants.create_key("team", "alice laptop", "member", "alice")
        verified = tenants.verify(member_key)
        assert verified is not None and verified.member == "alice" and record.member is None
        tenants.revoke(verified.prefix)
        assert [w[0] for w in tenants.workspaces()] == ["team"]
        tenants.ensure_workspace("team")  # again: no error, no second row
        assert [(w[0], w[2]) for w in tenants.workspaces()] == [("team", 1)]
        tenants.claim("s1", "team", record.id, "member", ephemeral=False)
        tenants.claim("s2", "team", record.id, "member", ephemeral=True)
        tenants.claim("s2", "team", record.id, "app", ephemeral=True)  # a claim replaces the earlier one
        assert sorted(tenants.sessions_of("team")) == ["s1", "s2"]  # (s3 is claimed below)
        assert tenants.ephemeral_sessions() == ["s2"]
        owner = tenants.owner("s2")
        assert owner is not None and owner.kind == "app" and (owner.disk, owner.workdir) == ("", "")
        tenants.claim("s3", "team", record.id, "member", False, "members/alice", "analyst/s3")  # a disk layout's
        placed = tenants.owner("s3")
        assert placed is not None and (placed.disk, placed.workdir) == ("members/alice", "analyst/s3")
        tenants.release("s2")
        assert tenants.owner("s2") is None
        revoked = tenants.revoke(record.prefix)
        assert revoked is not None and revoked.revoked_at is not None
        assert tenants.verify(key) is None and tenants.active_key(record.id) is None
        assert tenants.revoke(record.prefix) is None  # already revoked
    finally:
        tenants.close()


def test_roles_contract(config):
    tenants = stores.tenant_store(config, config.server.data_dir)
    roles = tenants.roles
    try:
        tenants.ensure_workspace("team")
        tenants.ensure_workspace("other")
        assert roles.member("team", "alice") is None and roles.members("team") == []
        roles.set_member("team", "alice", "owner")
        first = roles.member("team", "alice")
        assert first is not None and first.role == "owner"
        roles.set_member("team", "alice", "admin")  # a change keeps the row's creation time
        changed = roles.member("team", "alice")
        assert changed is not None and changed.role == "admin" and changed.created_at == first.created_at
        roles.set_member("team", "bob", "auditor")
        roles.set_member("other", "alice", "member")
        assert [(m.member, m.role) for m in roles.members("team")] == [("alice", "admin"), ("bob", "auditor")]
        assert roles.holders("team", "auditor") == ["bob"] and roles.holders("other", "auditor") == []
        assert roles.remove_member("team", "bob") and not roles.remove_member("team", "bob")
        assert roles.create_role("team", "auditor", ("audit.read", "keys.read", "audit.read"), "reads")
        assert not roles.create_role("team", "auditor", (), "")  # the name is taken
        role = roles.role("team", "auditor")
        assert role is not None and role.permissions == ("audit.read", "keys.read") and role.description == "reads"
        assert roles.role("other", "auditor") is None
        assert roles.update_role("team", "auditor", ("audit",), "all of the log")
        updated = roles.role("team", "auditor")
        assert updated is not None and updated.permissions == ("audit",) and updated.updated_at >= role.updated_at
        assert not roles.update_role("team", "nope", (), "")
        assert [r.name for r in roles.roles("team")] == ["auditor"]
        assert roles.delete_role("team", "auditor") and not roles.delete_role("team", "auditor")
        assert roles.roles("team") == []
    finally:
        tenants.close()


def test_audit_contract(config):
    log = stores.audit_log(config, config.server.data_dir)
    try:
        first = log.record_file_change(workspace="team", key_id="k1", session="s1", ephemeral=False, mode="put",
                                       path="a.txt", status=200)
        second = log.record_file_change(workspace="other", key_id="k2", session=None, ephemeral=False,
                                        mode="delete", path="b.txt", status=204)
        assert second > first
        rows = log.query(AuditFilter(workspace="team"))
        assert [(r["id"], r["path"]) for r in rows] == [(first, "a.txt")]
        assert [r["id"] for r in log.query(AuditFilter(key_ids=("k2", "k9")))] == [second]  # one person's keys
        assert log.query(AuditFilter(key_ids=())) == []
        change = log.record_admin(workspace="team", key_id="k1", action="member_role", target="bob",
                                  change={"by": {"member": "alice"}, "from": {"role": "member"}, "to": {"role": "admin"}})
        row = log.get(change)
        assert row is not None and row["kind"] == "admin" and row["path"] == "bob"
        assert json.loads(row["code"])["to"] == {"role": "admin"}
        entry = log.get(second)
        assert entry is not None and entry["mode"] == "delete"
        assert log.count() == 3
        assert log.prune(1, now=entry["ts"] + 2 * 86400) == 3
        assert log.count() == 0
    finally:
        log.close()


def test_audit_rows_cannot_be_updated(postgres_url, tmp_path):
    log = stores.audit_log(_config(tmp_path, postgres_url, "n"), tmp_path)
    entry = log.record_file_change(workspace="w", key_id="k", session=None, ephemeral=False, mode="put",
                                   path="x", status=200)
    log.close()
    with psycopg.connect(postgres_url) as conn, pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        conn.execute("UPDATE audit SET path = 'y' WHERE id = %s", (entry,))


DYING_NODE = textwrap.dedent("""
    import json, os, signal, sys
    import wasm_runner_server.security.audit as audit
    audit.BATCH_S = 3600  # the writer lets rows gather: killed, this node has committed none
    from wasm_runner_server.config import ServiceConfig
    from wasm_runner_server.security import stores
    config = ServiceConfig.model_validate(json.loads(sys.argv[1]))
    log = stores.audit_log(config, config.server.data_dir)
    ids = [log.record_file_change(workspace="team", key_id="k", session="s", ephemeral=False, mode="put",
                                  path=f"f{i}.txt", status=200) for i in range(3)]
    print(json.dumps(ids), flush=True)  # acknowledged
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_rows_a_killed_node_acknowledged_reach_postgres_through_another_node(postgres_url, tmp_path):
    dead_dir = tmp_path / "node-a"
    settings = {"server": {"data_dir": str(dead_dir)}, "store": {"url": postgres_url, "node": "node-a"}}

    done = subprocess.run([sys.executable, "-c", DYING_NODE, json.dumps(settings)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    acknowledged = json.loads(done.stdout)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit").fetchone() == (0,)  # only in node A's journal
    node_b = stores.audit_log(_config(tmp_path / "node-b", postgres_url, "node-b"), tmp_path / "node-b")
    try:
        assert node_b.replay_journal(dead_dir / "audit.journal") == 3
        assert node_b.replay_journal(dead_dir / "audit.journal") == 0  # replayed once; nothing left
        rows = node_b.query(AuditFilter(workspace="team"))
        assert [r["id"] for r in rows] == acknowledged
        assert [r["path"] for r in rows] == ["f0.txt", "f1.txt", "f2.txt"]
    finally:
        node_b.close()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT DISTINCT node FROM audit").fetchall() == [("node-a",)]


def test_a_live_nodes_journal_is_not_replayed_by_another(postgres_url, tmp_path):
    node_a = stores.audit_log(_config(tmp_path / "a", postgres_url, "a"), tmp_path / "a")
    node_b = stores.audit_log(_config(tmp_path / "b", postgres_url, "b"), tmp_path / "b")
    try:
        node_a.record_file_change(workspace="w", key_id="k", session=None, ephemeral=False, mode="put", path="x",
                                  status=200)
        assert node_b.replay_journal(tmp_path / "a" / "audit.journal") is None
    finally:
        node_a.close()
        node_b.close()


def test_two_nodes_give_distinct_audit_ids(postgres_url, tmp_path):
    logs = [stores.audit_log(_config(tmp_path / n, postgres_url, n), tmp_path / n) for n in ("a", "b")]
    try:
        ids = [log.record_file_change(workspace="w", key_id="k", session=None, ephemeral=False, mode="put",
                                      path=str(i), status=200) for i in range(5) for log in logs]
        assert len(set(ids)) == len(ids)
        for log in logs:
            log.flush()
        assert logs[0].count() == 10 and logs[1].count() == 10
    finally:
        for log in logs:
            log.close()


def test_migrations_apply_once_when_nodes_start_together(postgres_url, monkeypatch):
    settings = StoreSettings(url=postgres_url)
    opened: list[Postgres] = []
    applied: list[int] = []
    barrier = threading.Barrier(4)

    def counting(conn) -> int:
        applied.append(migrations.migrate(conn))
        return applied[-1]

    def start() -> None:
        barrier.wait()  # four nodes' pools open at once
        opened.append(Postgres(settings))

    monkeypatch.setattr(postgres_module, "migrate", counting)
    threads = [threading.Thread(target=start) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for db in opened:
            db.pool.close()
    assert len(opened) == 4
    assert sorted(applied) == [0, 0, 0, len(migrations.STEPS)]
    with psycopg.connect(postgres_url) as conn:
        versions = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert versions == [(n,) for n in range(1, len(migrations.STEPS) + 1)]


def test_a_newer_schema_is_refused(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        migrations.migrate(conn)
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (len(migrations.STEPS) + 1,))
        with pytest.raises(RuntimeError, match="newer version"):
            migrations.migrate(conn)


def test_the_url_password_is_never_shown(postgres, caplog):
    settings = StoreSettings(url=postgres.url("postgres"))
    assert postgres.password not in settings.redacted and "***" in settings.redacted
    assert redact("postgresql://u:p%40ss@h/db?password=zz") == "postgresql://u:***@h/db?password=***"
    wrong = StoreSettings(url=f"postgresql://wasm:{postgres.password}@127.0.0.1:1/postgres", connect_timeout_s=1)
    with pytest.raises(ConnectionError) as caught:
        Postgres(wrong)
    assert postgres.password not in str(caught.value)
    assert postgres.password not in caplog.text


def test_the_store_url_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("WASM_RUNNER_STORE_URL", "postgresql://u:p@db.internal:5432/x")
    assert store_settings(_config(tmp_path, "sqlite")).url == "postgresql://u:p@db.internal:5432/x"
    with pytest.raises(ValueError, match="store.url") as refused:
        ServiceConfig.model_validate({"store": {"url": "mysql://admin:hunter2@db/z"}})
    assert "hunter2" not in str(refused.value)  # the refused URL is quoted without its password


def test_a_node_keeps_its_name(tmp_path):
    settings = StoreSettings()
    name = settings.node_name(tmp_path)
    assert settings.node_name(tmp_path) == name
    assert StoreSettings(node="node-b").node_name(tmp_path) == "node-b"


def test_a_session_ids_owner_is_read_fresh_on_every_node(postgres_url, tmp_path):
    node_a = stores.tenant_store(_config(tmp_path / "a", postgres_url, "a"), tmp_path / "a")
    node_b = stores.tenant_store(_config(tmp_path / "b", postgres_url, "b"), tmp_path / "b")
    try:
        node_a.claim("x", "first", "k1", "member", ephemeral=False)
        seen = node_b.owner("x")
        assert seen is not None and seen.workspace == "first"
        node_a.release("x")  # deleted through node A, its id then taken by another workspace
        node_a.claim("x", "second", "k2", "member", ephemeral=False)
        seen = node_b.owner("x")
        assert seen is not None and seen.workspace == "second"
    finally:
        node_a.close()
        node_b.close()


def test_audit_replay_command(postgres_url, tmp_path, monkeypatch, capsys):
    import argparse

    from wasm_runner_server.cli.commands import add_audit_command

    dead = tmp_path / "dead"
    settings = {"server": {"data_dir": str(dead)}, "store": {"url": postgres_url, "node": "dead"}}
    done = subprocess.run([sys.executable, "-c", DYING_NODE, json.dumps(settings)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    monkeypatch.setenv("WASM_RUNNER_STORE_URL", postgres_url)
    parser = argparse.ArgumentParser()
    add_audit_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["audit", "replay", str(dead / "audit.journal"), "--data-dir", str(tmp_path / "here")])
    assert args.handler(args) == 0
    assert "replayed 3 audit rows" in capsys.readouterr().err
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit").fetchone() == (3,)
    assert postgres_url.split("@")[0].split(":")[-1] not in capsys.readouterr().err  # no password shown


def test_each_node_restores_its_own_sessions_and_lists_all(postgres_url, tmp_path):
    node_a = session_store(_config(tmp_path / "a", postgres_url, "node-a"))
    node_b = session_store(_config(tmp_path / "b", postgres_url, "node-b"))
    try:
        for i, store in enumerate((node_a, node_b, node_a)):
            assert store.insert(_row(f"s{i}", 100.0 + i))
        assert not node_b.insert(_row("s0", 200.0))  # an id is the cluster's
        assert [r.id for r in node_a.all()] == ["s0", "s2"] and [r.id for r in node_b.all()] == ["s1"]
        assert node_b.page(None, 10) == ["s0", "s1", "s2"]
        assert [(r.id, r.node) for r in node_b.elsewhere(["s0", "s1", "s2", "gone"])] == [("s0", "node-a"),
                                                                                          ("s2", "node-a")]
        node_b.delete("s0")  # not its session: node A's row stays
        assert [r.id for r in node_a.all()] == ["s0", "s2"]
    finally:
        node_a.close()
        node_b.close()
