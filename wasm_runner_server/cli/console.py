"""The `wasm-runner` command: the core's commands plus the service's (serve, mcp, keys, audit)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from wasm_runner.cli.run import add_commands, build_parser
from wasm_runner_server.cli.keys import add_audit_command, add_keys_command
from wasm_runner_server.cli.serve import add_serve_command
from wasm_runner_server.mcp.stdio import add_mcp_command


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
