"""How the service commands print: JSON for programs (`--json`), aligned columns for people."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime

import msgspec


def print_json(value: object) -> None:
    print(msgspec.json.encode(value).decode())


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns as wide as their widest cell; the last one is not padded."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in (headers, *rows):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())


def fields(pairs: Sequence[tuple[str, str]]) -> None:
    """`name: value` lines, names aligned."""
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        print(f"{name + ':':<{width + 1}} {value}")


def when(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value, unit = count / 1024, "KiB"
    for larger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit}"


def note(message: str) -> None:
    """A line for the person at the terminal (stderr: it never mixes with the data on stdout)."""
    print(message, file=sys.stderr)
