"""Fitting a tool result into a model's context: long text is cut to its head and tail, with a count
of what was cut, so that no result hands a model (or the MCP transport) more than a bounded amount."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types as types

MARKER_ROOM = 200
"""Room kept for the marker that replaces the middle of a clipped text (and what it points to)."""


def clip(text: str, limit: int, where: str = "") -> str:
    """`text` if it has at most `limit` characters, else its head and tail around a marker saying how many
    characters were cut (and `where` the full text is), `limit` characters in all."""
    if len(text) <= limit:
        return text
    keep = max(limit - MARKER_ROOM - len(where), 0)
    head = keep * 3 // 5  # a little more head: what a program printed first usually says what it does
    tail = keep - head
    # whole lines where they are not too long: a line cut in two misleads more than a shorter head
    newline = text.rfind("\n", head * 4 // 5, head)
    head = newline + 1 if newline != -1 else head
    start = len(text) - tail
    newline = text.find("\n", start, start + tail // 5)
    start = newline + 1 if newline != -1 else start
    cut = start - head
    marker = f"[{cut:,} characters cut{'; ' + where if where else ''}]\n"
    clipped = text[:head] + marker + text[start:]
    return clipped[:limit]


def share(lengths: Sequence[int], budget: int) -> int:
    """The largest cap such that the lengths, each capped at it, add up to at most `budget` (water-filling:
    short texts are kept whole and the long ones share the rest equally)."""
    remaining, left = budget, len(lengths)
    for length in sorted(lengths):
        if length * left > remaining:
            return max(remaining // left, 0)
        remaining -= length
        left -= 1
    return budget


def bound_content(content: list[Any], limit: int) -> list[Any]:
    """The text items of a tool result's content clipped so that together they have at most `limit`
    characters (images, resource links and embedded resources are kept as they are)."""
    texts = [item for item in content if isinstance(item, types.TextContent)]
    if sum(len(item.text) for item in texts) <= limit:
        return content
    cap = share([len(item.text) for item in texts], limit - 2 * len(texts))
    return [types.TextContent(type="text", text=clip(item.text, cap)) if isinstance(item, types.TextContent)
            else item for item in content]


def bound_structured(value: Any, limit: int) -> Any:
    """JSON data whose strings are clipped so that together they have at most `limit` characters."""
    lengths: list[int] = []
    _strings(value, lengths)
    if sum(lengths) <= limit:
        return value
    return _clipped(value, share(lengths, limit))


def _strings(value: Any, out: list[int]) -> None:
    if isinstance(value, str):
        out.append(len(value))
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


def _clipped(value: Any, cap: int) -> Any:
    if isinstance(value, str):
        return clip(value, cap)
    if isinstance(value, dict):
        return {key: _clipped(item, cap) for key, item in value.items()}
    if isinstance(value, list):
        return [_clipped(item, cap) for item in value]
    return value
