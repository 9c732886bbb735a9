"""The command line of a running service: sessions, exec, files, upload/download, packages, egress.

Everything here only calls the HTTP API through the typed client, so it lives in the client's
distribution: `pip install wasm-runner-client` is enough to drive a remote service
(`python -m wasm_runner_client.cli`), and the full `wasm-runner` command adds the same commands.
Parsing imports argparse alone; a command's module (and httpx) is imported when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from wasm_runner_client.cli.parsers import COMMANDS, add_service_commands

__all__ = ["COMMANDS", "add_service_commands", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wasm-runner", description="Drive a running wasm-runner service.")
    add_service_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    status: int = args.handler(args)
    return status
