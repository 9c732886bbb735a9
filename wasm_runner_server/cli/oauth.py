"""`wasm-runner oauth clients …`: register, list and delete the OAuth apps that act for members, working
on the data directory (or the cluster's database) as `wasm-runner keys` does.

    wasm-runner oauth clients create --workspace acme --name notebook --redirect-uri https://nb.example/cb \\
        --scope files:read --scope exec [--public]
    wasm-runner oauth clients list [--workspace acme] [--json]
    wasm-runner oauth clients delete wrc_3f9a1c2b7d4e5f60

A confidential app's secret is printed once; only its hash is stored. Deleting an app ends every grant
and token it holds. Arguments are defined in wasm_runner_server/cli/commands.py (`add_oauth_command`).
"""

from __future__ import annotations

import argparse
import json
import sys

from wasm_runner_server.cli.keys import config_of, data_dir_of
from wasm_runner_server.security import stores
from wasm_runner_server.security.oauth.store import ClientRecord, OAuthStore


def _store(args: argparse.Namespace) -> OAuthStore:
    return stores.oauth_store(config_of(args), data_dir_of(args))


def _record(record: ClientRecord) -> dict:
    return {"client_id": record.id, "workspace": record.workspace, "name": record.name,
            "redirect_uris": list(record.redirect_uris), "scopes": list(record.scopes), "public": record.public,
            "created_at": record.created_at}


def create_client(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        secret, record = store.create_client(args.workspace, args.name, args.redirect_uri, args.scope, args.public,
                                             "cli")
        tenants = stores.tenant_store(config_of(args), data_dir_of(args))
        try:
            tenants.ensure_workspace(args.workspace)
        finally:
            tenants.close()
    except ValueError as exc:
        print(f"wasm-runner oauth clients create: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(json.dumps({**_record(record), "client_secret": secret}))
    if secret:
        print("This is the only time the client secret is shown: store it now (only its hash is kept).",
              file=sys.stderr)
    return 0


def list_clients(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        records = store.clients(args.workspace)
    finally:
        store.close()
    if args.json:
        for record in records:
            print(json.dumps(_record(record)))
        return 0
    print(f"{'CLIENT ID':<22} {'WORKSPACE':<16} {'NAME':<20} {'TYPE':<12} SCOPES")
    for r in records:
        kind = "public" if r.public else "confidential"
        print(f"{r.id:<22} {r.workspace:<16} {r.name:<20} {kind:<12} {' '.join(r.scopes)}")
    return 0


def delete_client(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        record = store.delete_client(args.client_id)
    finally:
        store.close()
    if record is None:
        print(f"wasm-runner oauth clients delete: no app {args.client_id!r} (see `wasm-runner oauth clients list`)",
              file=sys.stderr)
        return 1
    print(f"deleted {record.id} ({record.name!r}, workspace {record.workspace!r}): its grants and tokens have ended",
          file=sys.stderr)
    return 0
