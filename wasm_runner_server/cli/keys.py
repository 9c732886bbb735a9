"""`wasm-runner keys …` and `wasm-runner audit …`: the admin commands, working on the data directory.

    wasm-runner keys create --workspace acme --name ci [--kind member|app|admin]
    wasm-runner keys list [--workspace acme] [--json]
    wasm-runner keys revoke wr_3f9a1c2b7d4e
    wasm-runner audit export --jsonl [--workspace acme] [--since UNIX] [--output FILE]
    wasm-runner audit prune [--days 90]

They open the same SQLite files as a running server (WAL), so a key created or revoked
here is valid or refused from the server's next request on. A key is printed once and
only its SHA-256 is stored: a lost key cannot be recovered; revoke it and create another.
Their arguments are defined in wasm_runner_server/cli/commands.py (`add_keys_command`, `add_audit_command`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from wasm_runner_server.security import stores
from wasm_runner_server.security.audit import AuditFilter, AuditLog
from wasm_runner_server.security.tenants import TenantStore


def data_dir_of(args: argparse.Namespace) -> Path:
    """The data directory the command works on: --data-dir, $WASM_RUNNER_DATA_DIR, else the config's."""
    if args.data_dir is not None:
        return args.data_dir
    if os.environ.get("WASM_RUNNER_DATA_DIR"):
        return Path(os.environ["WASM_RUNNER_DATA_DIR"])
    config = args.config or os.environ.get("WASM_RUNNER_CONFIG")
    from wasm_runner_server.config import load_config

    return load_config(config).server.data_dir


def config_of(args: argparse.Namespace):
    """The service configuration the command reads (--config, $WASM_RUNNER_CONFIG, else the defaults)."""
    from wasm_runner_server.config import load_config

    return load_config(args.config or os.environ.get("WASM_RUNNER_CONFIG") or None)


def tenants_of(args: argparse.Namespace) -> TenantStore:
    """The tenant store the service with this configuration uses ([store], WASM_RUNNER_STORE_URL)."""
    return stores.tenant_store(config_of(args), data_dir_of(args))


def audit_of(args: argparse.Namespace, *, journal: bool = True) -> AuditLog:
    return stores.audit_log(config_of(args), data_dir_of(args), journal=journal)


def _when(value: float | None) -> str:
    return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def create_key(args: argparse.Namespace) -> int:
    store = tenants_of(args)
    try:
        key, record = store.create_key(args.workspace, args.name, args.kind, args.member)
    except ValueError as exc:
        print(f"wasm-runner keys create: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(key)
    print(f"created {record.kind} key {record.prefix} ({record.name!r}) in workspace {record.workspace!r}.\n"
          "This is the only time the key is shown: store it now. It cannot be recovered later; "
          "if lost, revoke it and create another.", file=sys.stderr)
    return 0


def list_keys(args: argparse.Namespace) -> int:
    store = tenants_of(args)
    try:
        records = store.keys(args.workspace)
    finally:
        store.close()
    if args.json:
        for r in records:
            print(json.dumps({"prefix": r.prefix, "workspace": r.workspace, "name": r.name, "kind": r.kind,
                              "member": r.member, "created_at": r.created_at, "last_used_at": r.last_used_at,
                              "revoked_at": r.revoked_at}))
        return 0
    print(f"{'PREFIX':<16} {'WORKSPACE':<16} {'NAME':<16} {'KIND':<7} {'MEMBER':<12} {'CREATED':<21} "
          f"{'LAST USED':<21} STATUS")
    for r in records:
        status = f"revoked {_when(r.revoked_at)}" if r.revoked_at else "active"
        print(f"{r.prefix:<16} {r.workspace:<16} {r.name:<16} {r.kind:<7} {r.member or '-':<12} {_when(r.created_at):<21} "
              f"{_when(r.last_used_at):<21} {status}")
    return 0


def revoke_key(args: argparse.Namespace) -> int:
    store = tenants_of(args)
    try:
        record = store.revoke(args.prefix)
    finally:
        store.close()
    if record is None:
        print(f"wasm-runner keys revoke: no active key {args.prefix!r} (see `wasm-runner keys list`)", file=sys.stderr)
        return 1
    print(f"revoked {record.prefix} ({record.name!r}, workspace {record.workspace!r})", file=sys.stderr)
    return 0


def export_audit(args: argparse.Namespace) -> int:
    log = audit_of(args)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    count = 0
    try:
        for row in log.iterate(AuditFilter(workspace=args.workspace, session=args.session, since=args.since,
                                           until=args.until)):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    finally:
        log.close()
        if out is not sys.stdout:
            out.close()
    print(f"exported {count} audit rows", file=sys.stderr)
    return 0


def prune_audit(args: argparse.Namespace) -> int:
    days = args.days
    if days is None:
        from wasm_runner_server.config import load_config

        days = load_config(args.config or os.environ.get("WASM_RUNNER_CONFIG")).auth.audit_retention_days
    log = audit_of(args)
    try:
        removed = log.prune(days)
    finally:
        log.close()
    print(f"pruned {removed} audit rows older than {days} days", file=sys.stderr)
    return 0


def replay_audit(args: argparse.Namespace) -> int:
    """Drain a node's audit journal (one that died before its rows were committed) into the audit log."""
    log = audit_of(args, journal=False)
    try:
        added = log.replay_journal(Path(args.journal))
    finally:
        log.close()
    if added is None:
        print(f"wasm-runner audit replay: a running process owns {args.journal}; it commits its rows itself",
              file=sys.stderr)
        return 1
    print(f"replayed {added} audit rows from {args.journal}", file=sys.stderr)
    return 0
