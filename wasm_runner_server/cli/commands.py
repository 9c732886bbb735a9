"""The service's commands as argparse definitions: serve, mcp, keys, oauth, members, roles, audit.

Like the core's (wasm_runner/cli/commands.py), this module imports nothing heavy: each
handler's module (aiohttp, pydantic, the service, SQLite) is imported when its command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wasm_runner.cli.commands import LazyHandler, Subcommands
from wasm_runner_server.security.key_kinds import KINDS

ENVIRONMENT = {
    "host": "WASM_RUNNER_HOST",
    "port": "WASM_RUNNER_PORT",
    "data_dir": "WASM_RUNNER_DATA_DIR",
    "config": "WASM_RUNNER_CONFIG",
    "concurrency": "WASM_RUNNER_CONCURRENCY",
    "log_level": "WASM_RUNNER_LOG_LEVEL",
    "shutdown_timeout_s": "WASM_RUNNER_SHUTDOWN_TIMEOUT",
    "access_log": "WASM_RUNNER_ACCESS_LOG",
}
"""Environment variables for the serve settings."""


def extend_doctor_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    """The core's `doctor`, which also checks the cluster's parts a service config names."""
    doctor = subparsers.choices["doctor"]
    doctor.add_argument("--config", type=Path, help="a service config: also check its PostgreSQL [store] (reachable, "
                                                    "schema, clock) and S3 [storage] (write, read, delete)")
    doctor.set_defaults(handler=LazyHandler("wasm_runner_server.cli.doctor", "doctor_command"))
    return doctor


def add_serve_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve", help="run the HTTP service",
        description="Run the HTTP service (sessions, execution, files). Flags override environment "
                    "variables, which override the config file.",
    )
    parser.add_argument("--host", help=f"address to listen on (${ENVIRONMENT['host']}; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"port, 0 for any free one (${ENVIRONMENT['port']}; default 8080)")
    parser.add_argument("--data-dir", type=Path,
                        help=f"sessions and metadata (${ENVIRONMENT['data_dir']}; default ~/.local/share/wasm-runner)")
    parser.add_argument("--config", type=Path, help=f"TOML or JSON config file (${ENVIRONMENT['config']})")
    parser.add_argument("--concurrency", type=int,
                        help=f"executions at once (${ENVIRONMENT['concurrency']}; default: cores)")
    parser.add_argument("--shutdown-timeout", dest="shutdown_timeout_s", type=float,
                        help=f"seconds in-flight work may take on shutdown (${ENVIRONMENT['shutdown_timeout_s']})")
    parser.add_argument("--log-level", help=f"DEBUG, INFO, WARNING… (${ENVIRONMENT['log_level']}; default INFO)")
    parser.add_argument("--log-format", choices=("json", "text"), default="json", help="log line format")
    parser.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=None,
                        help=f"one line per request (${ENVIRONMENT['access_log']}; default on)")
    parser.add_argument("--no-auth", dest="no_auth", action="store_true",
                        help="serve without API keys, for local use only (logged loudly); default: keys required")
    parser.set_defaults(handler=LazyHandler("wasm_runner_server.cli.serve", "run_serve"))
    return parser


def add_mcp_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "mcp", help="serve MCP over stdio (for agents)",
        description="Serve the sandbox to an MCP client over stdin/stdout: code execution, files and "
                    "sessions as MCP tools. One connection is one session.",
    )
    parser.add_argument("--url", help="call this wasm-runner server instead of running one in the process")
    parser.add_argument("--api-key", help="with --url: the API key (default: $WASM_RUNNER_API_KEY)")
    parser.add_argument("--config", type=Path, help="TOML or JSON config file (as for `serve`)")
    parser.add_argument("--data-dir", type=Path,
                        help="keep sessions here (default: a temporary directory removed at exit)")
    parser.add_argument("--profile", help="profile of the connection's session (default: the server's default)")
    parser.add_argument("--concurrency", type=int, help="executions at once (default: cores)")
    parser.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True,
                        help="warm the Python runtime at start (default on)")
    parser.add_argument("--log-level", default="WARNING", help="to stderr (default WARNING)")
    parser.add_argument("--log-format", choices=("json", "text"), default="text", help="log line format")
    parser.set_defaults(handler=LazyHandler("wasm_runner_server.mcp.stdio", "run_mcp"))
    return parser


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="the server's data directory ($WASM_RUNNER_DATA_DIR)")
    parser.add_argument("--config", type=Path, help="the server's config file ($WASM_RUNNER_CONFIG)")


def add_oauth_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("oauth", help="register, list and delete OAuth apps",
                                   description="Manage the OAuth apps that act for members (docs/guides/oauth.md).")
    groups = parser.add_subparsers(dest="oauth_command", required=True)
    clients = groups.add_parser("clients", help="the apps (OAuth clients)")
    commands = clients.add_subparsers(dest="clients_command", required=True)
    create = commands.add_parser("create", help="register an app (a confidential app's secret is printed once)")
    create.add_argument("--workspace", required=True, help="whose members the app serves")
    create.add_argument("--name", required=True, help="what the consent page calls the app")
    create.add_argument("--redirect-uri", action="append", required=True,
                        help="an exact callback address: https, or http on loopback (repeat for several)")
    create.add_argument("--scope", action="append", required=True,
                        help="a scope the app may ask for: sessions:read, sessions:write, exec, files:read, "
                             "files:write, processes (repeat for several)")
    create.add_argument("--public", action="store_true",
                        help="a browser or native app: no secret, PKCE required (default: confidential)")
    _data_options(create)
    create.set_defaults(handler=LazyHandler("wasm_runner_server.cli.oauth", "create_client"))
    listing = commands.add_parser("list", help="list apps (never their secrets)")
    listing.add_argument("--workspace")
    listing.add_argument("--json", action="store_true")
    _data_options(listing)
    listing.set_defaults(handler=LazyHandler("wasm_runner_server.cli.oauth", "list_clients"))
    delete = commands.add_parser("delete", help="delete an app: its grants and tokens end at once")
    delete.add_argument("client_id", help="the app's client id (wrc_...)")
    _data_options(delete)
    delete.set_defaults(handler=LazyHandler("wasm_runner_server.cli.oauth", "delete_client"))
    return parser


def add_keys_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("keys", help="create, list and revoke API keys",
                                   description="Manage the API keys of the HTTP service's workspaces.")
    commands = parser.add_subparsers(dest="keys_command", required=True)
    create = commands.add_parser("create", help="create a key (printed once)")
    create.add_argument("--workspace", required=True, help="the workspace (tenant); created if new")
    create.add_argument("--name", required=True, help="what the key is for, e.g. 'ci' or 'alice'")
    create.add_argument("--kind", choices=KINDS, default="member",
                        help="member: sessions see shared/; app: own session only; admin: the admin API")
    create.add_argument("--member", help="the person a member or admin key acts for, e.g. 'alice' "
                                         "(several keys may act for one member)")
    _data_options(create)
    create.set_defaults(handler=LazyHandler("wasm_runner_server.cli.keys", "create_key"))
    listing = commands.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--workspace")
    listing.add_argument("--json", action="store_true")
    _data_options(listing)
    listing.set_defaults(handler=LazyHandler("wasm_runner_server.cli.keys", "list_keys"))
    revoke = commands.add_parser("revoke", help="revoke a key by its prefix (refused from the next request)")
    revoke.add_argument("prefix", help="the key's prefix (wr_<id>) as `keys list` shows it")
    _data_options(revoke)
    revoke.set_defaults(handler=LazyHandler("wasm_runner_server.cli.keys", "revoke_key"))
    return parser


def add_members_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("members", help="list members and set their roles",
                                   description="The members of a workspace and their team roles (owner, admin, "
                                               "member, or a custom role); each change is audited.")
    commands = parser.add_subparsers(dest="members_command", required=True)
    listing = commands.add_parser("list", help="members and their roles")
    listing.add_argument("--workspace", required=True)
    listing.add_argument("--json", action="store_true")
    _data_options(listing)
    listing.set_defaults(handler=LazyHandler("wasm_runner_server.cli.team", "list_members"))
    put = commands.add_parser("set", help="set a member's role")
    put.add_argument("--workspace", required=True)
    put.add_argument("--member", required=True, help="the member id, as keys name it (`keys create --member`)")
    put.add_argument("--role", required=True, help="owner, admin, member, or a custom role of the workspace")
    _data_options(put)
    put.set_defaults(handler=LazyHandler("wasm_runner_server.cli.team", "set_member"))
    reset = commands.add_parser("reset", help="take a member's role away (back to the default role `member`)")
    reset.add_argument("--workspace", required=True)
    reset.add_argument("--member", required=True)
    _data_options(reset)
    reset.set_defaults(handler=LazyHandler("wasm_runner_server.cli.team", "reset_member"))
    return parser


def add_roles_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("roles", help="list, create, update and delete custom roles",
                                   description="A workspace's custom roles, assembled from the permission tree "
                                               "(`roles permissions` prints it); each change is audited.")
    commands = parser.add_subparsers(dest="roles_command", required=True)
    listing = commands.add_parser("list", help="the team roles and the workspace's custom roles")
    listing.add_argument("--workspace", required=True)
    listing.add_argument("--json", action="store_true")
    _data_options(listing)
    listing.set_defaults(handler=LazyHandler("wasm_runner_server.cli.team", "list_roles"))
    tree = commands.add_parser("permissions", help="print the permission tree")
    tree.set_defaults(handler=LazyHandler("wasm_runner_server.cli.team", "print_permissions"))
    for verb, text in (("create", "create a custom role"), ("update", "replace a custom role's permissions")):
        command = commands.add_parser(verb, help=text)
        command.add_argument("--workspace", required=True)
        command.add_argument("--name", required=True)
        command.add_argument("--permission", action="append", default=[], dest="permissions",
                             help="a permission of the tree, e.g. audit.read or keys (repeat for more)")
        command.add_argument("--description", help="what the role is for")
        _data_options(command)
        command.set_defaults(handler=LazyHandler("wasm_runner_server.cli.team", f"{verb}_role"))
    delete = commands.add_parser("delete", help="delete a custom role no member holds")
    delete.add_argument("--workspace", required=True)
    delete.add_argument("--name", required=True)
    _data_options(delete)
    delete.set_defaults(handler=LazyHandler("wasm_runner_server.cli.team", "delete_role"))
    return parser


def add_audit_command(subparsers: Subcommands) -> argparse.ArgumentParser:
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
    _data_options(export)
    export.set_defaults(handler=LazyHandler("wasm_runner_server.cli.keys", "export_audit"))
    prune = commands.add_parser("prune", help="remove rows older than the retention period")
    prune.add_argument("--days", type=float, help="retention in days (default: auth.audit_retention_days)")
    _data_options(prune)
    prune.set_defaults(handler=LazyHandler("wasm_runner_server.cli.keys", "prune_audit"))
    replay = commands.add_parser("replay", help="commit the rows of a node's audit journal (a node that died)",
                                 description="Commit the rows a node journaled but had not committed when it died "
                                             "(its data directory's audit.journal) to the audit log; rows already "
                                             "there are skipped. Refused while a running node owns the journal.")
    replay.add_argument("journal", help="the journal file (DATA_DIR/audit.journal of that node)")
    _data_options(replay)
    replay.set_defaults(handler=LazyHandler("wasm_runner_server.cli.keys", "replay_audit"))
    return parser
