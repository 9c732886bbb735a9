"""`wasm-runner members` and `wasm-runner roles` on a data directory: the changes the API makes, audited as the
command line (key `cli`), and refused without changing anything while a running service holds the audit log."""

from __future__ import annotations

import json

from wasm_runner_server.cli.console import main
from wasm_runner_server.security.audit import AuditFilter, AuditLog
from wasm_runner_server.security.tenants import TenantStore


def test_members_and_roles_commands_change_roles_and_audit_them(tmp_path, capsys):
    data = ["--data-dir", str(tmp_path)]
    assert main(["roles", "create", "--workspace", "acme", "--name", "auditor", "--permission", "audit.read",
                 "--permission", "keys.read", "--description", "reads the log", *data]) == 0
    assert main(["members", "set", "--workspace", "acme", "--member", "alice", "--role", "auditor", *data]) == 0
    assert main(["members", "set", "--workspace", "acme", "--member", "olga", "--role", "owner", *data]) == 0
    capsys.readouterr()
    assert main(["members", "list", "--workspace", "acme", "--json", *data]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(m["member"], m["role"]) for m in listed] == [("alice", "auditor"), ("olga", "owner")]
    assert main(["roles", "delete", "--workspace", "acme", "--name", "auditor", *data]) == 1  # alice holds it
    assert "held by alice" in capsys.readouterr().err
    assert main(["roles", "create", "--workspace", "acme", "--name", "x", "--permission", "keys.fly", *data]) == 1
    assert "unknown permission 'keys.fly'" in capsys.readouterr().err
    assert main(["roles", "update", "--workspace", "acme", "--name", "auditor", "--permission", "audit", *data]) == 0
    assert main(["members", "reset", "--workspace", "acme", "--member", "alice", *data]) == 0
    assert main(["roles", "delete", "--workspace", "acme", "--name", "auditor", *data]) == 0
    capsys.readouterr()
    assert main(["roles", "list", "--workspace", "acme", "--json", *data]) == 0
    roles = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["name"], r["holders"]) for r in roles] == [("owner", ["olga"]), ("admin", []), ("member", [])]
    assert main(["roles", "permissions"]) == 0
    assert "keys.create" in capsys.readouterr().out

    log = AuditLog.in_data_dir(tmp_path, journal=False)
    try:
        rows = log.query(AuditFilter(workspace="acme", kind="admin"))
    finally:
        log.close()
    assert [(r["mode"], r["path"], r["key_id"]) for r in rows] == [
        ("role_create", "auditor", "cli"), ("member_role", "alice", "cli"), ("member_role", "olga", "cli"),
        ("role_update", "auditor", "cli"), ("member_reset", "alice", "cli"), ("role_delete", "auditor", "cli")]
    assert json.loads(rows[3]["code"])["from"]["permissions"] == ["audit.read", "keys.read"]


def test_a_change_is_refused_while_a_running_service_holds_the_audit_log(tmp_path, capsys):
    service_log = AuditLog.in_data_dir(tmp_path)  # what a running service holds
    try:
        assert main(["members", "set", "--workspace", "acme", "--member", "alice", "--role", "admin",
                     "--data-dir", str(tmp_path)]) == 1
        assert "through its API" in capsys.readouterr().err
        assert main(["members", "list", "--workspace", "acme", "--data-dir", str(tmp_path)]) == 0  # reads work
    finally:
        service_log.close()
    tenants = TenantStore.in_data_dir(tmp_path)
    try:
        assert tenants.roles.member("acme", "alice") is None  # nothing was changed
    finally:
        tenants.close()
