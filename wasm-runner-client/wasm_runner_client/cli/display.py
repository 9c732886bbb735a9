"""How the service commands print: JSON for programs (`--json`), aligned columns for people.

Names and messages can come from the guest (a file it created, an error it raised): in tables,
fields and error lines their control and format characters are shown escaped (`\x1b`), so that
a name cannot move the cursor, retitle or recolour the terminal, or reorder text with bidi
controls. A program's own output (`exec`, `files cat`) is passed through as it is, like `cat`.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Sequence
from datetime import datetime

import msgspec


def inert(text: str) -> str:
    """`text` with every control or format character (C0, C1, DEL, bidi controls) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c == " " or not unicodedata.category(c).startswith("C") else
                   c.encode("unicode_escape").decode("ascii") for c in text)


def print_json(value: object) -> None:
    print(msgspec.json.encode(value).decode())


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns as wide as their widest cell; the last one is not padded."""
    rows = [[inert(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in (headers, *rows):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())


def fields(pairs: Sequence[tuple[str, str]]) -> None:
    """`name: value` lines, names aligned."""
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        print(f"{inert(name) + ':':<{width + 1}} {inert(value)}")


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
