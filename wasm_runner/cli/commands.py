"""The core's commands as argparse definitions: run, prepare, doctor, batch.

This module imports nothing heavy: each command's handler is imported when that
command runs (`LazyHandler`), so `wasm-runner run` pays for no other command. The
service's console (wasm_runner_server/cli/console.py) adds these next to its own.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast, get_args

from wasm_runner_protocol.execution import Language, Limits, MiB

Handler = Callable[[argparse.Namespace], int]
"""A command: parsed arguments in, exit status out (the parsers' `handler` default)."""


class Subcommands(Protocol):
    """What `ArgumentParser.add_subparsers()` returns, as the commands use it."""

    choices: dict[str, argparse.ArgumentParser]
    """The parsers added so far, by command name."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


class LazyHandler:
    """The handler `module.name` of a command, imported only when the command runs."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.__name__ = name

    def resolve(self) -> Handler:
        return cast(Handler, getattr(importlib.import_module(self.module), self.__name__))

    def __call__(self, args: argparse.Namespace) -> int:
        return self.resolve()(args)

    def __repr__(self) -> str:
        return f"LazyHandler({self.module}.{self.__name__})"


def add_run_command(sub: Subcommands) -> argparse.ArgumentParser:
    run = sub.add_parser("run", help="run code in a sandbox and print its output (exit status: the guest's)")
    run.add_argument("script", nargs="?", help="a .py, .js, .ts/.mts or .sh file to run")
    run.add_argument("-c", "--code", help="code to run instead of a file")
    run.add_argument("--lang", "--language", dest="language", choices=get_args(Language))
    run.add_argument("--profile", help="a named profile, as the service has them (python, javascript, typescript, "
                                       "python-data, node, typescript-native, bun, bash, or a --config file's): "
                                       "its language, provider, limits, "
                                       "environment allowlist and mounts")
    run.add_argument("--config", help="the service's TOML or JSON config file: its profiles, default and maximum "
                                      "limits and default_profile (the profile used without --profile)")
    run.add_argument("--workspace", help="host directory the guest sees as /workspace (default: a throwaway one)")
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="pass one variable to the guest")
    run.add_argument("--allow-net", action="append", default=[], metavar="HOST[:PORT]", dest="allow_net",
                     help="let the run reach this destination (repeatable; a name, *.suffix, an address or a "
                          "network; with --profile it must lie within the profile's network policy)")
    run.add_argument("--stdin", dest="stdin_file", help="file whose content is the guest's stdin")
    run.add_argument("--provider", choices=["wasm", "native"], help="who runs it (default: the profile's, else by language)")
    run.add_argument("--json", action="store_true", help="print the result as JSON instead of the guest's output")
    run.add_argument("--typecheck", action="store_const", const=True, default=False,
                     help="TypeScript: type-check with tsc first and print its diagnostics, then run it")
    run.add_argument("--typecheck-block", dest="typecheck", action="store_const", const="block",
                     help="TypeScript: as --typecheck, but a program with a type error does not run "
                          "(TypeCheckError, exit status 1)")
    run.add_argument("--typecheck-timeout", type=float, default=60.0, help="the type check's seconds (60)")
    run.add_argument("--install", action="append", default=[], metavar="REQUIREMENT",
                     help="install a pure-Python package for the run first (e.g. tinyapp==1.0; repeatable), "
                          "resolved and downloaded by the host, cached in ~/.cache/wasm-runner/packages")
    run.add_argument("--index", help="the Python package index for --install (default: PyPI's simple index)")
    limits = run.add_argument_group("limits (default: the profile's; without a profile, in parentheses)")
    defaults = Limits()
    limits.add_argument("--timeout", type=float, help=f"wall-clock seconds ({defaults.timeout_s})")
    limits.add_argument("--fuel", type=int, help="instruction budget (unmetered)")
    limits.add_argument("--memory-mib", type=int, help=f"MiB ({defaults.memory_bytes // MiB})")
    limits.add_argument("--output-bytes", type=int, help=f"per stream ({defaults.output_bytes})")
    limits.add_argument("--disk-mib", type=int, help=f"workspace quota MiB ({defaults.disk_bytes // MiB})")
    limits.add_argument("--disk-files", type=int, help=f"workspace file count ({defaults.disk_files})")
    run.set_defaults(handler=LazyHandler("wasm_runner.cli.run", "run_command"))
    return run


def add_prepare_command(sub: Subcommands) -> argparse.ArgumentParser:
    prepare = sub.add_parser("prepare", help="build and compile the guest runtimes (done on first use otherwise)")
    prepare.set_defaults(handler=LazyHandler("wasm_runner.cli.machine", "prepare_command"))
    return prepare


def add_doctor_command(sub: Subcommands) -> argparse.ArgumentParser:
    doctor = sub.add_parser("doctor", help="report which native tools and isolation features are present")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(handler=LazyHandler("wasm_runner.cli.machine", "doctor_command"))
    return doctor


def add_batch_command(sub: Subcommands) -> argparse.ArgumentParser:
    batch = sub.add_parser("batch", help="run every request of a JSON-lines file, each in a fresh sandbox")
    batch.add_argument("items", help="JSON lines, one ExecRequest per line ('-' for stdin)")
    batch.add_argument("-o", "--output", default="-", help="where results go, one JSON line each (default: stdout)")
    batch.add_argument("--concurrency", type=int, default=None, help="runs in flight (default: cores)")
    batch.add_argument("--no-progress", action="store_true", help="no live progress line on stderr")
    batch.add_argument("--summary", metavar="FILE", help="write the end summary as JSON here (counts, groups, pass@k)")
    batch.add_argument("--pass-at", default="1", metavar="K[,K...]", help="the k of pass@k (default: 1)")
    batch.add_argument("--cache", metavar="DIR", help="answer items seen before from this result cache, and keep new results")
    batch.add_argument("--cache-mib", type=int, default=1024, help="the result cache's size bound (default: 1024 MiB)")
    batch.add_argument("--ray", metavar="ADDRESS",
                       help="run the items on a Ray cluster: HOST:PORT of its head, ray://HOST:PORT, or 'auto' "
                            "(the cluster running on this machine, else a local one); needs the `ray` extra")
    batch.add_argument("--group-field", default="group", metavar="NAME",
                       help="the item field that groups samples for pass@k, e.g. task_id (default: group)")
    batch.set_defaults(handler=LazyHandler("wasm_runner.cli.batch", "batch_command"))
    return batch


def add_commands(sub: Subcommands) -> None:
    """Every command of the core."""
    add_run_command(sub)
    add_prepare_command(sub)
    add_doctor_command(sub)
    add_batch_command(sub)


def build_parser(prog: str = "wasm-runner") -> tuple[argparse.ArgumentParser, Subcommands]:
    parser = argparse.ArgumentParser(prog=prog, description="Run untrusted code in WebAssembly with hard limits.")
    sub = parser.add_subparsers(dest="command", required=True)
    return parser, sub


def main(argv: Sequence[str] | None = None) -> int:
    """The core's commands alone (`python -m wasm_runner.cli`)."""
    parser, sub = build_parser()
    add_commands(sub)
    args = parser.parse_args(argv)
    return cast(int, args.handler(args))  # argparse.Namespace attributes are Any
