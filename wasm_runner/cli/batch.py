"""`wasm-runner batch`: NDJSON requests in, NDJSON results out, with a live progress line."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec

from wasm_runner.runner import Runner
from wasm_runner_protocol.execution import ExecRequest, ExecResult, GuestError

_decode = msgspec.json.Decoder(ExecRequest).decode
_encode = msgspec.json.Encoder().encode


def outcome_of(result: ExecResult) -> str:
    """The word a result is counted under: its verdict, else ok / error / limit:<name>."""
    if result.verdict is not None:
        return result.verdict
    if result.limit is not None:
        return f"limit:{result.limit}"
    return "ok" if result.exit_code == 0 and result.error is None else "error"


def _requests(lines: IO[str], rejected: list[ExecResult]) -> Iterator[ExecRequest]:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            request = _decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
            rejected.append(ExecResult(exit_code=2, id=f"line {number}", error=GuestError(
                type="InvalidRequest", message=f"line {number}: {exc}")))
            continue
        yield request if request.id is not None else msgspec.structs.replace(request, id=str(number))


def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


class Progress:
    def __init__(self, total: int | None, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.started = time.monotonic()
        self._shown = 0.0

    def add(self, outcome: str) -> None:
        self.done += 1
        self.counts[outcome] += 1
        now = time.monotonic()
        if self.enabled and now - self._shown > 0.2:
            self._shown = now
            sys.stderr.write("\r" + self.line() + " " * 8)
            sys.stderr.flush()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        bar = ""
        if self.total:
            filled = int(30 * self.done / self.total)
            eta = (self.total - self.done) / rate if rate else 0
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} ETA {eta:5.1f}s "
        else:
            bar = f"{self.done} done "
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        return f"{bar}{rate:7.1f} items/s  {counts}"


async def _run(args: argparse.Namespace, out: IO[bytes], lines: IO[str]) -> Progress:
    progress = Progress(_count_lines(args.items), enabled=not args.no_progress)
    rejected: list[ExecResult] = []
    with Runner(concurrency=args.concurrency) as runner:
        async for result in runner.run_many(_requests(lines, rejected), concurrency=args.concurrency):
            out.write(_encode(result) + b"\n")
            progress.add(outcome_of(result))
            while rejected:
                bad = rejected.pop()
                out.write(_encode(bad) + b"\n")
                progress.add("invalid")
    for bad in rejected:
        out.write(_encode(bad) + b"\n")
        progress.add("invalid")
    return progress


def batch_command(args: argparse.Namespace) -> int:
    if args.items != "-" and not Path(args.items).is_file():
        print(f"wasm-runner batch: no such file: {args.items}", file=sys.stderr)
        return 2
    lines = sys.stdin if args.items == "-" else open(args.items, encoding="utf-8")
    out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")
    try:
        progress = asyncio.run(_run(args, out, lines))
    except KeyboardInterrupt:
        print("\nwasm-runner batch: interrupted; results so far are written", file=sys.stderr)
        return 130
    finally:
        if out is not sys.stdout.buffer:
            out.close()
        if lines is not sys.stdin:
            lines.close()
    if not args.no_progress:
        sys.stderr.write("\r" + " " * 100 + "\r")
    print(f"batch: {progress.line()} in {time.monotonic() - progress.started:.1f}s", file=sys.stderr)
    return 0 if progress.counts.get("invalid", 0) == 0 else 1
