"""`wasm-runner processes`: a running service's background processes, through the typed client.

Only the client (httpx and msgspec) is imported: these commands talk to a service, they run
nothing themselves. The service is `--url` (else $WASM_RUNNER_URL, else http://127.0.0.1:8080)
and the key `--api-key` (else $WASM_RUNNER_API_KEY). Errors exit with the statuses all the service
commands share (wasm_runner_client.cli.status).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec

from wasm_runner_client import Client, ProcessInfo
from wasm_runner_client.cli.status import guarded

NOT_ENDED = 0
"""`logs --follow` exits with the process's exit code once it ended; this when it is not known."""


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[Client]:
    with Client(args.url, api_key=args.api_key) as client:
        yield client


def _print_json(value: object) -> None:
    print(msgspec.json.encode(value).decode())




@guarded
def start_command(args: argparse.Namespace) -> int:
    command = (args.command[1:] if args.command[:1] == ["--"] else args.command) or None
    if args.command[:1] != ["--"] and command is not None and command[0].startswith("-"):
        print(f"error: {command[0]} is not a program: options go before SESSION, the command after `--`",
              file=sys.stderr)
        return 2
    if (command is None) == (args.code is None):
        print("error: give a command after `--`, or --code (with --language)", file=sys.stderr)
        return 2
    memory = args.memory_mib * 1024 * 1024 if args.memory_mib is not None else None
    with _client(args) as client:
        info = client.start_process(args.session, command, code=args.code or "", language=args.language,
                                    env=dict(args.env), cwd=args.cwd, memory_bytes=memory, name=args.name)
    if args.json:
        _print_json(info)
    else:
        print(info.id)
    return 0


def _row(info: ProcessInfo) -> str:
    code = "" if info.exit_code is None else str(info.exit_code)
    ports = ",".join(str(p) for p in info.ports)
    return f"{info.id:<6} {info.state:<8} {code:>4} {ports:<11} {info.name:<12} {' '.join(info.argv)}"


@guarded
def list_command(args: argparse.Namespace) -> int:
    with _client(args) as client:
        listing = client.list_processes(args.session)
    if args.json:
        _print_json(listing)
        return 0
    print(f"{'ID':<6} {'STATE':<8} {'EXIT':>4} {'PORTS':<11} {'NAME':<12} COMMAND")
    for info in listing.processes:
        print(_row(info))
    print(f"{listing.live} live of at most {listing.max_live}", file=sys.stderr)
    return 0


@guarded
def logs_command(args: argparse.Namespace) -> int:
    out = sys.stdout
    with _client(args) as client:
        if not args.follow:
            offset = args.offset
            while True:
                chunk = client.process_output(args.session, args.process, stream=args.stream, offset=offset)
                if chunk.dropped:
                    print(f"[{chunk.dropped} bytes no longer kept]", file=sys.stderr)
                out.write(chunk.data)
                if chunk.next_offset == offset:
                    break
                offset = chunk.next_offset
            out.flush()
            return 0
        with client.process_output_stream(args.session, args.process, stream=args.stream,
                                          offset=args.offset) as stream:
            for chunk in stream:
                if chunk.dropped:
                    print(f"[{chunk.dropped} bytes no longer kept]", file=sys.stderr)
                out.write(chunk.data)
                out.flush()
        end = stream.exit
    if end is None:
        return NOT_ENDED
    print(f"[process {args.process} {end.state}" + (f", exit code {end.exit_code}" if end.exit_code is not None else "")
          + (f": {end.error}" if end.error else "") + "]", file=sys.stderr)
    return end.exit_code if end.exit_code is not None else 1


@guarded
def stop_command(args: argparse.Namespace) -> int:
    with _client(args) as client:
        info = client.stop_process(args.session, args.process)
    if args.json:
        _print_json(info)
    else:
        print(_row(info))
    return 0


@guarded
def url_command(args: argparse.Namespace) -> int:
    with _client(args) as client:
        link = client.preview_url(args.session, args.port, expires_in=args.expires_in)
    print(link.url)
    return 0
