"""`wasm-runner processes` as argparse definitions (the handlers: wasm_runner_server/cli/processes.py).

Kept apart from the other commands' definitions, which import the core: these commands only
call a running service, so the console builds their parser alone and imports nothing of the
sandbox for them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol, get_args

from wasm_runner_client.cli.parsers import key_value
from wasm_runner_protocol.execution import Language


class Subcommands(Protocol):
    """What `ArgumentParser.add_subparsers()` returns, as the commands use it."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def _handler(name: str) -> Callable[[argparse.Namespace], int]:
    """The command `name` of wasm_runner_server.cli.processes, imported when it runs."""

    def handler(args: argparse.Namespace) -> int:
        from wasm_runner_server.cli import processes

        command: Callable[[argparse.Namespace], int] = getattr(processes, name)
        return command(args)

    return handler


def _service_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the service (default: $WASM_RUNNER_URL, else http://127.0.0.1:8080)")
    parser.add_argument("--api-key", help="its API key (default: $WASM_RUNNER_API_KEY)")


def add_processes_command(subparsers: Subcommands) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "processes", help="start, list, follow and stop a running service's background processes",
        description="Background processes of a session on a running service (through its HTTP API).")
    commands = parser.add_subparsers(dest="processes_command", required=True)

    start = commands.add_parser("start", help="start a process; prints its id",
                                description="Start a process in SESSION's sandbox that keeps running; options "
                                            "go before SESSION, the command after it: `wasm-runner processes "
                                            "start --name web SESSION -- python3 -m http.server 8000`")
    start.add_argument("session")
    start.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments (after --)")
    start.add_argument("--code", help="code to run instead of a command")
    start.add_argument("--language", default="bash", choices=get_args(Language),
                       help="the language of --code (default bash)")
    start.add_argument("--cwd", default="", help="working directory under /workspace")
    start.add_argument("--env", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                       help="a variable (repeatable)")
    start.add_argument("--memory-mib", type=int, help="memory of its process tree (default: the profile's)")
    start.add_argument("--name", default="", help="a label shown in listings")
    start.add_argument("--json", action="store_true", help="print the process's description as JSON")
    start.set_defaults(handler=_handler("start_command"))

    listing = commands.add_parser("list", help="the session's processes (live ones and the last ended ones)")
    listing.add_argument("session")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_handler("list_command"))

    logs = commands.add_parser("logs", help="a process's output; --follow streams it until the process ends",
                               description="Print a process's output kept by the service, from --offset; with "
                                           "--follow keep printing until it ends, then exit with its exit code.")
    logs.add_argument("session")
    logs.add_argument("process", help="the process id, e.g. p1")
    logs.add_argument("--stream", choices=("stdout", "stderr"), default="stdout")
    logs.add_argument("--offset", type=int, default=0, help="the byte to start from (default 0)")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.set_defaults(handler=_handler("logs_command"))

    stop = commands.add_parser("stop", help="stop a process and its whole tree (TERM, then KILL)")
    stop.add_argument("session")
    stop.add_argument("process")
    stop.add_argument("--json", action="store_true")
    stop.set_defaults(handler=_handler("stop_command"))

    url = commands.add_parser("url", help="a preview link to a port, for a browser (no key needed until it expires)")
    url.add_argument("session")
    url.add_argument("port", type=int)
    url.add_argument("--expires-in", type=float, help="seconds (default: the service's)")
    url.set_defaults(handler=_handler("url_command"))
    for each in (start, listing, logs, stop, url):
        _service_options(each)
    return parser
