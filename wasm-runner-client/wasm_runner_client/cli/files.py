"""`wasm-runner files ls|cat|rm`: a session's workspace, read and pruned from the terminal."""

from __future__ import annotations

import argparse
import sys

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import inert, print_json, size, table, when
from wasm_runner_client.cli.status import OK, REFUSED, CliError, guarded
from wasm_runner_client.errors import ConflictError


@guarded
def ls_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        listing = client.list_files(args.session, args.path, recursive=args.recursive)
    if args.json:
        print_json(listing)
        return OK
    table(["TYPE", "SIZE", "MODIFIED", "PATH"],
          [[e.type, size(e.size) if e.type == "file" else "-", when(e.mtime),
            e.path + ("/" if e.type == "directory" else "")] for e in listing.entries])
    if listing.truncated:
        print("(the listing is truncated: list a subfolder)", file=sys.stderr)
    return OK


@guarded
def cat_command(args: argparse.Namespace) -> int:
    sys.stdout.flush()
    with connect(args) as client:
        client.download(args.session, args.path, sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return OK


@guarded
def rm_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        for path in args.paths:
            try:
                result = client.delete_file(args.session, path, recursive=args.recursive)
            except ConflictError as exc:
                if exc.code != "directory_not_empty":
                    raise
                raise CliError(f"{exc.message} ({exc.code})", REFUSED, hint="pass -r to remove it and all it holds") from exc
            if args.json:
                print_json(result)
            elif not args.quiet:
                print(f"removed {result.type} {inert(result.path)}")
    return OK
