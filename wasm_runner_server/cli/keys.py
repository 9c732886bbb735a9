"""`wasm-runner keys …` and `wasm-runner audit …`: the admin commands, working on the data directory.

    wasm-runner keys create --workspace acme --name ci [--kind member|app|admin]
    wasm-runner keys list [--workspace acme] [--json]
    wasm-runner keys revoke wr_3f9a1c2b7d4e
    wasm-runner audit export --jsonl [--workspace acme] [--since UNIX] [--output FILE]
    wasm-runner audit prune [--days 90]

They open the same SQLite files as a running server (WAL), so a key created or revoked
here is valid or refused from the server's next request on. A key is printed once and
only its SHA-256 is stored: a lost key cannot be recovered; revoke it and create another.
The main CLI wires them in with `add_keys_command(subparsers)` and `add_audit_command(subparsers)`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from wasm_runner_server.security.audit import AuditFilter, AuditLog
from wasm_runner_server.security.tenants import KINDS, TenantStore


def _data_dir(args: argparse.Namespace) -> Path:
    if args.data_dir is not None:
        return args.data_dir
    if os.environ.get("WASM_RUNNER_DATA_DIR"):
        return Path(os.environ["WASM_RUNNER_DATA_DIR"])
    config = args.config or os.environ.get("WASM_RUNNER_CONFIG")
    from wasm_runner_server.config import load_config

    return load_config(config).server.data_dir


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="the server's data directory ($WASM_RUNNER_DATA_DIR)")
    parser.add_argument("--config", type=Path, help="the server's config file ($WASM_RUNNER_CONFIG)")


def _when(value: float | None) -> str:
    return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def add_keys_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("keys", help="create, list and revoke API keys",
                                   description="Manage the API keys of the HTTP service's workspaces.")
    commands = parser.add_subparsers(dest="keys_command", required=True)
    create = commands.add_parser("create", help="create a key (printed once)")
    create.add_argument("--workspace", required=True, help="the workspace (tenant); created if new")
    create.add_argument("--name", required=True, help="what the key is for, e.g. 'ci' or 'alice'")
    create.add_argument("--kind", choices=KINDS, default="member",
                        help="member: sessions see shared/; app: own session only; admin: the admin API")
    _common(create)
    create.set_defaults(handler=_create)
    listing = commands.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--workspace")
    listing.add_argument("--json", action="store_true")
    _common(listing)
    listing.set_defaults(handler=_list)
    revoke = commands.add_parser("revoke", help="revoke a key by its prefix (refused from the next request)")
    revoke.add_argument("prefix", help="the key's prefix (wr_<id>) as `keys list` shows it")
    _common(revoke)
    revoke.set_defaults(handler=_revoke)
    return parser


def _create(args: argparse.Namespace) -> int:
    store = TenantStore.in_data_dir(_data_dir(args))
    try:
        key, record = store.create_key(args.workspace, args.name, args.kind)
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


def _list(args: argparse.Namespace) -> int:
    store = TenantStore.in_data_dir(_data_dir(args))
    try:
        records = store.keys(args.workspace)
    finally:
        store.close()
    if args.json:
        for r in records:
            print(json.dumps({"prefix": r.prefix, "workspace": r.workspace, "name": r.name, "kind": r.kind,
                              "created_at": r.created_at, "last_used_at": r.last_used_at,
                              "revoked_at": r.revoked_at}))
        return 0
    print(f"{'PREFIX':<16} {'WORKSPACE':<16} {'NAME':<16} {'KIND':<7} {'CREATED':<21} {'LAST USED':<21} STATUS")
    for r in records:
        status = f"revoked {_when(r.revoked_at)}" if r.revoked_at else "active"
        print(f"{r.prefix:<16} {r.workspace:<16} {r.name:<16} {r.kind:<7} {_when(r.created_at):<21} "
              f"{_when(r.last_used_at):<21} {status}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    store = TenantStore.in_data_dir(_data_dir(args))
    try:
        record = store.revoke(args.prefix)
    finally:
        store.close()
    if record is None:
        print(f"wasm-runner keys revoke: no active key {args.prefix!r} (see `wasm-runner keys list`)", file=sys.stderr)
        return 1
    print(f"revoked {record.prefix} ({record.name!r}, workspace {record.workspace!r})", file=sys.stderr)
    return 0


def add_audit_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("audit", help="export or prune the audit log",
                                   description="The audit log of the HTTP service (append-only).")
    commands = parser.add_subparsers(dest="audit_command", required=True)
    export = commands.add_parser("export", help="write audit rows as JSON lines")
    export.add_argument("--jsonl", action="store_true", default=True, help="JSON lines (the only format)")
    export.add_argument("--workspace")
    export.add_argument("--session")
    export.add_argument("--since", type=float, help="unix time")
    export.add_argument("--until", type=float, help="unix time")
    export.add_argument("--output", "-o", type=Path, help="file to write (default: stdout)")
    _common(export)
    export.set_defaults(handler=_export)
    prune = commands.add_parser("prune", help="remove rows older than the retention period")
    prune.add_argument("--days", type=float, help="retention in days (default: auth.audit_retention_days)")
    _common(prune)
    prune.set_defaults(handler=_prune)
    return parser


def _export(args: argparse.Namespace) -> int:
    log = AuditLog.in_data_dir(_data_dir(args))
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


def _prune(args: argparse.Namespace) -> int:
    days = args.days
    if days is None:
        from wasm_runner_server.config import load_config

        days = load_config(args.config or os.environ.get("WASM_RUNNER_CONFIG")).auth.audit_retention_days
    log = AuditLog.in_data_dir(_data_dir(args))
    try:
        removed = log.prune(days)
    finally:
        log.close()
    print(f"pruned {removed} audit rows older than {days} days", file=sys.stderr)
    return 0
