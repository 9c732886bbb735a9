"""Cutting text to fit a model's context: head and tail at line ends, a count of what was cut, budgets shared."""

from __future__ import annotations

import re

import mcp_types as types

from wasm_runner_server.mcp.rendering import bound_content, bound_structured, clip, share

LINES = "".join(f"row {i}\n" for i in range(50_000))


def test_clip_keeps_whole_lines_of_head_and_tail_and_counts_the_cut() -> None:
    clipped = clip(LINES, 5_000, "full text: out.txt")
    assert len(clipped) <= 5_000
    head, marker, tail = re.split(r"(\[[\d,]+ characters cut; full text: out.txt\]\n)", clipped)
    assert head.startswith("row 0\n") and head.endswith("\n") and tail.endswith("row 49999\n")
    assert tail.startswith("row ")
    count = re.search(r"\[([\d,]+)", marker)
    assert count is not None
    cut = int(count.group(1).replace(",", ""))
    assert len(head) + cut + len(tail) == len(LINES)
    assert LINES.startswith(head) and LINES.endswith(tail)


def test_short_texts_are_kept_whole_and_long_ones_share_the_rest() -> None:
    assert share([10, 20], 1_000) == 1_000
    cap = share([100, 50_000, 80_000], 10_000)
    assert 100 + 2 * cap <= 10_000 and cap > 4_000
    content = [types.TextContent(type="text", text="short"), types.TextContent(type="text", text=LINES)]
    bounded = bound_content(content, 3_000)
    assert bounded[0].text == "short" and len(bounded[1].text) <= 3_000


def test_structured_strings_share_the_budget() -> None:
    data = {"stdout": LINES, "stderr": LINES, "exit_code": 0, "outputs": [{"data": "x" * 10}]}
    bounded = bound_structured(data, 8_000)
    assert bounded["exit_code"] == 0 and bounded["outputs"] == [{"data": "x" * 10}]
    assert len(bounded["stdout"]) + len(bounded["stderr"]) <= 8_000
    assert "characters cut" in bounded["stdout"]
