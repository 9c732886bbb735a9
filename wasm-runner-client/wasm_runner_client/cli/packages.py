"""`wasm-runner packages install|list`: a session's packages (installed by the host, read-only to the guest)."""

from __future__ import annotations

import argparse

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import inert, print_json, size, table
from wasm_runner_client.cli.status import OK, REFUSED, guarded, report


@guarded
def install_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.npm:
            result = client.install(args.session, npm=args.names, index=args.index)
        else:
            result = client.install(args.session, args.names, index=args.index)
    if args.json:
        print_json(result)
    elif result.ok:
        for package in result.installed:
            print(inert(f"installed {package.name} {package.version} ({package.source})"))
    if not result.ok:  # a refusal is a result, not an HTTP error: it still exits non-zero
        error = result.error
        if error is not None:
            report(f"{error.message} ({error.kind}" + (f", {error.package}" if error.package else "") + ")",
                   error.hint)
        else:
            report("the install failed")
        return REFUSED
    return OK


@guarded
def list_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        lock = client.packages(args.session)
    if args.json:
        print_json(lock)
        return OK
    table(["NAME", "VERSION", "SIZE", "FILE"], [[p.name, p.version, size(p.size), p.filename] for p in lock.python])
    return OK
