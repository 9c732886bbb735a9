"""`wasm-runner batch`: NDJSON requests in, NDJSON results out, with a live progress line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import msgspec

from wasm_runner.cluster.settings import ClusterUnavailableError, RayCluster
from wasm_runner.evaluation.cache import ResultCache
from wasm_runner.evaluation.summary import BatchSummary, outcome_of
from wasm_runner.runner import Runner
from wasm_runner_protocol.execution import ExecRequest, ExecResult, GuestError

__all__ = ["batch_command", "outcome_of"]

_decode = msgspec.json.Decoder(ExecRequest).decode
_encode = msgspec.json.Encoder().encode


def _decoder(group_field: str) -> Callable[[str], ExecRequest]:
    """Lines as ExecRequests; with another grouping field (e.g. a suite's `task_id`), that field
    becomes the request's group."""
    if group_field == "group":
        return _decode

    def decode(line: str) -> ExecRequest:
        fields = msgspec.json.decode(line)
        if not isinstance(fields, dict):
            raise ValueError("a line is one JSON object")
        group = fields.pop(group_field, None)
        if group is not None:
            fields["group"] = str(group)
        return msgspec.convert(fields, ExecRequest)
    return decode


def _requests(lines: IO[str], rejected: list[ExecResult], group_field: str = "group") -> Iterator[ExecRequest]:
    decode = _decoder(group_field)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            request = decode(line)
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
    def __init__(self, total: int | None, enabled: bool, ks: tuple[int, ...] = (1,)) -> None:
        self.total, self.enabled = total, enabled
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.summary = BatchSummary(ks)
        self.cache: ResultCache | None = None
        self.started = time.monotonic()
        self._shown = 0.0

    def add(self, outcome: str, result: ExecResult) -> None:
        self.done += 1
        self.counts[outcome] += 1
        self.summary.add(result, outcome)
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


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(k) for k in text.split(",") if k.strip())
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1:
        raise ValueError(f"--pass-at takes positive integers separated by commas, not {text!r}")
    return ks


async def _run(args: argparse.Namespace, out: IO[bytes], lines: IO[str], ks: tuple[int, ...]) -> Progress:
    progress = Progress(_count_lines(args.items), enabled=not args.no_progress, ks=ks)
    rejected: list[ExecResult] = []
    cache = progress.cache = ResultCache(args.cache, max_bytes=args.cache_mib * 1024 * 1024) if args.cache else None
    cluster = RayCluster(address=args.ray) if args.ray else None
    with Runner(concurrency=args.concurrency) as runner:
        results = runner.run_many(_requests(lines, rejected, args.group_field), concurrency=args.concurrency,
                                  cache=cache, cluster=cluster)
        async for result in results:
            out.write(_encode(result) + b"\n")
            progress.add(outcome_of(result), result)
            while rejected:
                bad = rejected.pop()
                out.write(_encode(bad) + b"\n")
                progress.add("invalid", bad)
    for bad in rejected:
        out.write(_encode(bad) + b"\n")
        progress.add("invalid", bad)
    return progress


def batch_command(args: argparse.Namespace) -> int:
    if args.items != "-" and not Path(args.items).is_file():
        print(f"wasm-runner batch: no such file: {args.items}", file=sys.stderr)
        return 2
    try:
        ks = _ks(args.pass_at)
        if args.cache_mib <= 0:
            raise ValueError("--cache-mib must be positive")
    except ValueError as exc:
        print(f"wasm-runner batch: {exc}", file=sys.stderr)
        return 2
    lines = sys.stdin if args.items == "-" else open(args.items, encoding="utf-8")
    out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")
    try:
        progress = asyncio.run(_run(args, out, lines, ks))
    except ClusterUnavailableError as exc:
        print(f"wasm-runner batch: {exc}", file=sys.stderr)
        return 2
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
    elapsed = time.monotonic() - progress.started
    print(f"batch: {progress.line()} in {elapsed:.1f}s", file=sys.stderr)
    print(progress.summary.text(), file=sys.stderr)
    if args.summary:
        summary = {**progress.summary.to_dict(), "duration_s": round(elapsed, 3)}
        if progress.cache is not None:
            summary["cache"] = progress.cache.stats()
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0 if progress.counts.get("invalid", 0) == 0 else 1
