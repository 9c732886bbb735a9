"""The `wasm-runner` command: the core's commands, the service's (serve, mcp, keys, members, roles, audit) and those
that drive a running service (processes, and sessions, exec, files, ... from the client's distribution).

The parsers come from light modules (argparse definitions only); a command's module,
and what it needs (the service, aiohttp, pydantic), is imported only when it runs.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["run"]:  # one run: the core's parsers alone, nothing of the service's (tens of ms)
        from wasm_runner.cli.commands import main as core_main

        return core_main(arguments)

    from wasm_runner_client.cli import COMMANDS, add_service_commands
    from wasm_runner_server.cli.process_commands import add_processes_command

    if arguments[:1] and arguments[0] in ("processes", *COMMANDS):
        # A client of a running service: the core is not even imported.
        parser = argparse.ArgumentParser(prog="wasm-runner")
        light = parser.add_subparsers(dest="command", required=True)
        add_processes_command(light)
        add_service_commands(light)
        args = parser.parse_args(arguments)
        return args.handler(args)

    from wasm_runner.cli.commands import add_commands, build_parser
    from wasm_runner_server.cli.commands import (
        add_audit_command,
        add_keys_command,
        add_mcp_command,
        add_members_command,
        add_oauth_command,
        add_roles_command,
        add_serve_command,
        extend_doctor_command,
    )

    parser, sub = build_parser()
    add_commands(sub)
    extend_doctor_command(sub)
    add_serve_command(sub)
    add_mcp_command(sub)
    add_keys_command(sub)
    add_oauth_command(sub)
    add_members_command(sub)
    add_roles_command(sub)
    add_audit_command(sub)
    add_processes_command(sub)
    add_service_commands(sub)
    args = parser.parse_args(arguments)
    return args.handler(args)


def run() -> int:
    """The `wasm-runner` executable: `main`, then an exit without the interpreter's teardown.

    Tearing down the modules a command loaded (wasmtime's engine and compiled code among
    them) took longer than a one-shot run itself. The exit handler is registered before
    anything else is imported, so it runs after every other one (they run last-registered
    first): the cleanups they do (sandboxes, cgroups, temporary copies, log handlers) are
    all done when it ends the process.
    """
    status: list[int] = []

    def exit_now() -> None:
        if status:  # the command returned (an exception keeps the ordinary exit)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed pipe: nothing more can be written
                    pass
            os._exit(status[0])

    atexit.register(exit_now)
    status.append(main())
    return status[0]


if __name__ == "__main__":
    sys.exit(run())
