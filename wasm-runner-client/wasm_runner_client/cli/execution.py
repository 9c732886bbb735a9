"""`wasm-runner exec`: run code in a session (or once, in a throwaway workspace), streaming its output.

The output is written as the service streams it (server-sent events), so a long program shows
its progress; the exit status is the guest's exit code, or the CLI's own for a limit or an error
(wasm_runner_client.cli.status).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import inert, print_json
from wasm_runner_client.cli.sessions import policy
from wasm_runner_client.cli.status import LOCAL_ERROR, CliError, guarded, limit_status, report
from wasm_runner_client.sync_client import ExecStream
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecResult

MiB = 1024 * 1024
SUFFIXES = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
            ".ts": "typescript", ".mts": "typescript", ".sh": "bash", ".bash": "bash"}
"""The language of a program file by its suffix, when --language does not say."""


def _target(args: argparse.Namespace) -> None:
    """Sort the positionals into `session` and `file`: `SESSION FILE`; `SESSION` with -c; `FILE` alone
    (a one-shot run, as before sessions could be named without --session)."""
    first = args.first
    if first is None:
        return
    if args.file is None and args.code is None:
        if first != "-" and not Path(first).exists():
            raise CliError(f"no file {first!r} to run",
                           hint=f"if {first} is a session, give the code to run in it: exec {first} -c CODE, "
                                f"exec {first} FILE, or exec {first} - (reads it from stdin)", status=LOCAL_ERROR)
        args.file = first
        return
    if args.session is not None:
        raise CliError(f"two sessions: {first!r} and --session {args.session!r}", hint="name the session once")
    args.session = first


def _program(args: argparse.Namespace) -> tuple[str, str | None]:
    """The code to run and the language its file name suggests."""
    if (args.code is None) == (args.file is None):
        raise CliError("give the code with -c CODE, or a FILE to run (`-` reads it from stdin)",
                       hint="e.g. wasm-runner exec -c 'print(6 * 7)'")
    if args.code is not None:
        return args.code, None
    if args.file == "-":
        return sys.stdin.read(), None
    path = Path(args.file)
    return path.read_text(encoding="utf-8"), SUFFIXES.get(path.suffix.lower())




def _limits(args: argparse.Namespace) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if args.timeout is not None:
        limits["timeout_s"] = args.timeout
    if args.memory_mib is not None:
        limits["memory_bytes"] = args.memory_mib * MiB
    return limits


def _exit_code(result: ExecResult) -> int:
    """The guest's exit code as a process status (one outside 0-255 would wrap, maybe to 0: it is 1)."""
    status = limit_status(result.limit)
    if status is not None:
        return status
    return result.exit_code if 0 <= result.exit_code < 256 else 1


def _finish(result: ExecResult, *, streamed: dict[str, list[str]]) -> int:
    """Print what the stream did not (a stream never sent, the last expression, an error the program's
    stderr does not show), then the exit status."""
    if "stdout" not in streamed and result.stdout:
        sys.stdout.write(result.stdout)
    if "stderr" not in streamed and result.stderr:
        sys.stderr.write(result.stderr)
    shown = "".join(streamed["stderr"]) if "stderr" in streamed else result.stderr
    error = result.error
    if error is not None and result.limit is None:
        if error.message not in shown:
            report(f"{error.type}: {error.message}", error.hint)
        elif error.hint and error.hint not in shown:
            print(f"hint: {inert(error.hint)}", file=sys.stderr)
    if result.value is not None:
        sys.stdout.write(result.value + "\n")
    sys.stdout.flush()
    if result.truncated:
        report(f"{' and '.join(result.truncated)} truncated at limits.output_bytes")
    if result.limit is not None:
        report(f"limit {result.limit}: {LIMIT_MESSAGES.get(result.limit, 'the run was stopped')}")
    return _exit_code(result)


def _stream(stream: ExecStream[Any]) -> int:
    streamed: dict[str, list[str]] = {}
    with stream:
        for chunk in stream:
            out = sys.stdout if chunk.stream == "stdout" else sys.stderr
            out.write(chunk.text)
            out.flush()
            streamed.setdefault(chunk.stream, []).append(chunk.text)
        result = stream.collect()
    return _finish(result, streamed=streamed)


@guarded
def exec_command(args: argparse.Namespace) -> int:
    _target(args)
    code, suggested = _program(args)
    language = args.language or suggested
    stdin = Path(args.input).read_text(encoding="utf-8") if args.input else ""
    egress = policy(args.egress, args.allow)
    options: dict[str, Any] = {"language": language, "stdin": stdin, "env": dict(args.env),
                               "limits": _limits(args) or None, "profile": args.profile, "egress": egress}
    with connect(args) as client:
        if args.session is None:
            if args.fresh:
                raise CliError("--fresh applies to a session's run (--session ID); a one-shot run is always fresh")
            if args.json:
                result: ExecResult = client.run(code, **options)
            else:
                return _stream(client.run_stream(code, **options))
        elif args.json:
            result = client.exec(args.session, code, fresh=args.fresh, **options)
        else:
            return _stream(client.exec_stream(args.session, code, fresh=args.fresh, **options))
    print_json(result)
    return _exit_code(result)
