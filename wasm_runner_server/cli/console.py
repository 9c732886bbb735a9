"""The `wasm-runner` command: the core's commands plus the service's (serve, mcp, keys, audit).

The parsers come from light modules (argparse definitions only); a command's module,
and what it needs (the service, aiohttp, pydantic), is imported only when it runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from wasm_runner.cli.commands import add_commands, build_parser
from wasm_runner_server.cli.commands import add_audit_command, add_keys_command, add_mcp_command, add_serve_command


def main(argv: Sequence[str] | None = None) -> int:
    parser, sub = build_parser()
    add_commands(sub)
    add_serve_command(sub)
    add_mcp_command(sub)
    add_keys_command(sub)
    add_audit_command(sub)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
