"""The core's command line: `wasm-runner run` and `wasm-runner prepare`.

`add_commands` lets the service's CLI (server/cli.py) offer these next to its own.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import msgspec

from wasm_runner.runner import Runner
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecResult, Limits, MiB
from wasm_runner_protocol.guest import language_for_path


def add_commands(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run code in a sandbox and print its output (exit status: the guest's)")
    run.add_argument("script", nargs="?", help="a .py, .js or .sh file to run")
    run.add_argument("-c", "--code", help="code to run instead of a file")
    run.add_argument("--lang", "--language", dest="language", choices=["python", "javascript", "bash", "sh"])
    run.add_argument("--workspace", help="host directory the guest sees as /workspace (default: a throwaway one)")
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="pass one variable to the guest")
    run.add_argument("--stdin", dest="stdin_file", help="file whose content is the guest's stdin")
    run.add_argument("--provider", choices=["wasm", "native"])
    run.add_argument("--json", action="store_true", help="print the result as JSON instead of the guest's output")
    limits = run.add_argument_group("limits (defaults in parentheses)")
    defaults = Limits()
    limits.add_argument("--timeout", type=float, default=defaults.timeout_s, help="wall-clock seconds (%(default)s)")
    limits.add_argument("--fuel", type=int, default=None, help="instruction budget (unmetered)")
    limits.add_argument("--memory-mib", type=int, default=defaults.memory_bytes // MiB, help="MiB (%(default)s)")
    limits.add_argument("--output-bytes", type=int, default=defaults.output_bytes, help="per stream (%(default)s)")
    limits.add_argument("--disk-mib", type=int, default=defaults.disk_bytes // MiB, help="workspace quota MiB (%(default)s)")
    limits.add_argument("--disk-files", type=int, default=defaults.disk_files, help="workspace file count (%(default)s)")
    run.set_defaults(handler=_run)

    prepare = sub.add_parser("prepare", help="build and compile the guest runtimes (done on first use otherwise)")
    prepare.set_defaults(handler=_prepare)

    doctor = sub.add_parser("doctor", help="report which native tools and isolation features are present")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(handler=_doctor)

    from wasm_runner.cli import batch as batch_cli

    batch_cli.add_command(sub)


def _run(args: argparse.Namespace) -> int:
    if (args.code is None) == (args.script is None):
        print("wasm-runner run: give either a script file or -c CODE", file=sys.stderr)
        return 2
    if args.code is not None:
        code, language = args.code, args.language or "python"
    else:
        path = Path(args.script)
        if not path.is_file():
            print(f"wasm-runner run: no such file: {path}", file=sys.stderr)
            return 2
        code = path.read_text()
        language = args.language or language_for_path(path.name)
        if language is None:
            print(f"wasm-runner run: cannot tell the language of {path.name}; pass --lang", file=sys.stderr)
            return 2
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"wasm-runner run: --env takes KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        env[key] = value
    try:
        limits = Limits(timeout_s=args.timeout, fuel=args.fuel, memory_bytes=args.memory_mib * MiB,
                        output_bytes=args.output_bytes, disk_bytes=args.disk_mib * MiB, disk_files=args.disk_files)
    except ValueError as exc:
        print(f"wasm-runner run: {exc}", file=sys.stderr)
        return 2
    stdin = Path(args.stdin_file).read_text() if args.stdin_file else ""
    listener = None if args.json else _echo
    with Runner() as runner:
        fields = dict(language=language, env=env, stdin=stdin, limits=limits, provider=args.provider)
        if args.workspace:
            os.makedirs(args.workspace, exist_ok=True)
            session = runner.session(workspace_dir=args.workspace)
            result = session.run_sync(code, listener=listener, fresh=True, **fields)
        else:
            result = runner.run_sync(code, listener=listener, **fields)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
    else:
        _report(result)
    return result.exit_code if 0 <= result.exit_code < 256 else 1


def _echo(stream: str, data: bytes) -> None:
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.buffer.write(data)
    out.flush()


def _report(result: ExecResult) -> None:
    if result.truncated:
        print(f"[wasm-runner] output truncated: {', '.join(result.truncated)}", file=sys.stderr)
    if result.limit is not None:
        message = result.error.message if result.error is not None else LIMIT_MESSAGES[result.limit]
        print(f"[wasm-runner] limit {result.limit}: {message}", file=sys.stderr)
    elif result.error is not None and result.error.type in ("GuestCrash", "RuntimeUnavailable"):
        print(f"[wasm-runner] {result.error.message}", file=sys.stderr)


def _prepare(args: argparse.Namespace) -> int:
    with Runner() as runner:
        runner.prepare()
    print("runtimes ready")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from wasm_runner.providers.native.doctor import main as doctor_main

    return doctor_main(["--json"] if args.json else [])


def build_parser(prog: str = "wasm-runner") -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(prog=prog, description="Run untrusted code in WebAssembly with hard limits.")
    sub = parser.add_subparsers(dest="command", required=True)
    return parser, sub


def main(argv: list[str] | None = None) -> int:
    parser, sub = build_parser()
    add_commands(sub)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
