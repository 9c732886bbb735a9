"""`wasm-runner egress show|set|reset`: where a session's runs may connect (within its profile's policy)."""

from __future__ import annotations

import argparse

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import inert, print_json
from wasm_runner_client.cli.sessions import describe_egress, policy
from wasm_runner_client.cli.status import OK, CliError, guarded
from wasm_runner_client.wire import SessionInfo


def _print(info: SessionInfo, as_json: bool) -> None:
    if as_json:
        print_json(info.egress)
    else:
        print(inert(describe_egress(info.egress)))


@guarded
def show_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        _print(client.get_session(args.session), args.json)
    return OK


@guarded
def set_command(args: argparse.Namespace) -> int:
    egress = policy(args.mode, args.allow)
    if egress is None:  # argparse requires --mode; kept for type narrowing
        raise CliError("give --mode open|deny|allowlist")
    with connect(args) as client:
        _print(client.update_session(args.session, egress=egress), args.json)
    return OK


@guarded
def reset_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        _print(client.update_session(args.session, egress=None), args.json)
    return OK
