"""Edits and unified diffs applied to a text: the parts of `WorkspaceFiles.edit` and `apply_patch`
that know nothing of files (finding occurrences, explaining a near miss, parsing and applying hunks)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from wasm_runner.workspace.budget import Budget
from wasm_runner.workspace.file_errors import PatchError

SHOWN_OCCURRENCES = 10
"""How many line numbers an edit_not_unique error names."""


def occurrence_lines(text: str, needle: str, budget: Budget, limit: int = SHOWN_OCCURRENCES) -> list[int]:
    """The lines of the first `limit` occurrences of `needle` (not overlapping, as `str.replace` sees
    them), numbered in one pass: each step counts only the newlines since the previous one."""
    lines: list[int] = []
    line, counted = 1, 0
    start = text.find(needle)
    while start != -1 and len(lines) < limit:
        budget.check("the edit", hint="make old_text longer so it matches once")
        line += text.count("\n", counted, start)
        counted = start
        lines.append(line)
        start = text.find(needle, start + len(needle))
    return lines


def near_miss_hint(text: str, needle: str, budget: Budget) -> str:
    """Why `needle` may not have been found; every step is one linear pass over the text."""
    squash = re.compile(r"\s+")
    flat_needle = squash.sub(" ", needle).strip()
    budget.check("the edit")
    if flat_needle and flat_needle in squash.sub(" ", text):
        return "the text occurs with different whitespace or line breaks; copy it exactly from the file"
    budget.check("the edit")
    first = needle.strip().splitlines()[0].strip() if needle.strip() else ""
    at = text.find(first) if first else -1
    if at != -1:
        line = text.count("\n", 0, at) + 1
        return f"its first line occurs at line {line} but the rest differs; read the file again and copy the text exactly"
    return "read the file again: it may have changed, and old_text must match exactly (whitespace included)"


# -- unified diffs -----------------------------------------------------------------------

# Numbers bounded: int() of a huge one is slow (and past 4300 digits an error).
_HUNK = re.compile(r"^@@ -(\d{1,18})(?:,(\d{1,18}))? \+(\d{1,18})(?:,(\d{1,18}))? @@")


@dataclass
class Hunk:
    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    old_no_eol: bool = False
    new_no_eol: bool = False


def parse_unified_diff(diff: str) -> list[Hunk]:
    """The hunks of a one-file unified diff; `---`/`+++`/`diff`/`index` headers are optional."""
    hunks: list[Hunk] = []
    current: Hunk | None = None
    left_old = left_new = 0
    last_tag = ""
    files = 0
    lines = diff.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for i, raw in enumerate(lines):
        raw = raw[:-1] if raw.endswith("\r") else raw
        header = _HUNK.match(raw)
        if header:
            current = Hunk(int(header[1]))
            hunks.append(current)
            left_old = int(header[2]) if header[2] is not None else 1
            left_new = int(header[4]) if header[4] is not None else 1
            continue
        in_counted_body = current is not None and (left_old > 0 or left_new > 0)
        if not in_counted_body and raw.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files += 1
            if files > 1:
                raise PatchError("", "the diff changes more than one file", "send one diff per file")
            current = None
            continue
        if current is None:
            continue  # preamble: diff/index/---/+++ lines
        if raw == "":
            tag, body = " ", ""
        else:
            tag, body = raw[0], raw[1:]
        if tag == " ":
            current.old.append(body)
            current.new.append(body)
            left_old -= 1
            left_new -= 1
        elif tag == "-":
            current.old.append(body)
            left_old -= 1
        elif tag == "+":
            current.new.append(body)
            left_new -= 1
        elif tag == "\\":
            if last_tag in (" ", "-"):
                current.old_no_eol = True
            if last_tag in (" ", "+"):
                current.new_no_eol = True
            continue
        elif not in_counted_body and raw.startswith(("diff ", "index ")):
            continue
        else:
            raise PatchError("", f"unexpected line in a hunk: {raw[:80]!r}",
                             "every hunk line starts with ' ', '-' or '+'")
        last_tag = tag
    if not hunks:
        raise PatchError("", "the diff has no hunks", "send a unified diff with @@ -a,b +c,d @@ hunk headers")
    return hunks


_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def apply_hunks(text: str, hunks: list[Hunk], path: str, budget: Budget) -> str:
    lines = _LINE.findall(text)
    crlf = sum(1 for line in lines if line.endswith("\r\n"))
    eol = "\r\n" if crlf > len(lines) / 2 else "\n"
    keys = _LineKeys([line.rstrip("\r\n") for line in lines], budget)
    out: list[str] = []
    cursor = 0
    delta = 0
    for number, hunk in enumerate(hunks, 1):
        expected = max(hunk.old_start - 1 + delta, cursor) if hunk.old else max(hunk.old_start + delta, cursor)
        if not hunk.old and hunk.old_start == 0:
            expected = cursor
        at = keys.find_block(hunk.old, expected, cursor)
        if at is None:
            raise PatchError(path, f"hunk {number} (@@ -{hunk.old_start}) does not apply: its context and removed "
                             f"lines are not in {path!r}", "read the file again and regenerate the diff")
        out.extend(lines[cursor:at])
        replaced_last = at + len(hunk.old) == len(lines) and len(lines) > 0
        for j, new in enumerate(hunk.new):
            is_last = j == len(hunk.new) - 1
            if is_last and hunk.new_no_eol:
                out.append(new)
            elif is_last and replaced_last and hunk.old and not lines[-1].endswith("\n") and not hunk.old_no_eol and \
                    hunk.new and hunk.new[-1] == hunk.old[-1]:
                out.append(new)  # an unchanged last line without a newline stays without one
            else:
                out.append(new + eol)
        delta += len(hunk.new) - len(hunk.old)
        cursor = at + len(hunk.old)
    out.extend(lines[cursor:])
    for k in range(len(out) - 1):  # joining must never glue two lines together
        if not out[k].endswith("\n"):
            out[k] += eol
    return "".join(out)


class _LineKeys:
    """The lines of a file, compared by block in constant time (a rolling hash over line ids).

    Comparing a hunk's lines at each candidate position would cost the hunk's length per
    position (quadratic when the hunk moved far); the hash of any block is a subtraction.
    The base is random per file, so no diff can be made to collide on purpose; a hash match
    is confirmed line by line.
    """

    _MOD = (1 << 61) - 1

    def __init__(self, keys: list[str], budget: Budget) -> None:
        self.keys = keys
        self.budget = budget
        self._base = secrets.randbelow(self._MOD - 2) + 2
        self._ids: dict[str, int] = {}
        self._prefix: list[int] | None = None
        self._powers: list[int] = [1]

    def __len__(self) -> int:
        return len(self.keys)

    def _id(self, key: str) -> int:
        return self._ids.setdefault(key, len(self._ids) + 1)

    def _power(self, n: int) -> int:
        powers = self._powers
        while len(powers) <= n:
            powers.append(powers[-1] * self._base % self._MOD)
        return powers[n]

    def _hash_of(self, block: list[str]) -> int:
        h = 0
        for k, key in enumerate(block):
            if k % 4096 == 0:
                self.budget.check("applying the patch", hint="regenerate the diff against the current file")
            h = (h * self._base + self._id(key)) % self._MOD
        return h

    def _prefixes(self) -> list[int]:
        if self._prefix is None:
            prefix = [0]
            for k, key in enumerate(self.keys):
                if k % 4096 == 0:
                    self.budget.check("applying the patch", hint="regenerate the diff against the current file")
                prefix.append((prefix[-1] * self._base + self._id(key)) % self._MOD)
            self._prefix = prefix
        return self._prefix

    def find_block(self, block: list[str], expected: int, floor: int) -> int | None:
        """Where `block` starts in the lines, at `floor` or after, nearest to `expected` (earlier first)."""
        keys = self.keys
        if not block:
            return min(max(expected, floor), len(keys))
        n = len(block)
        limit = len(keys) - n
        if floor <= expected <= limit and keys[expected: expected + n] == block:
            return expected  # the usual case: the hunk did not move
        prefix = self._prefixes()
        target = self._hash_of(block)
        shift = self._power(n)
        mod = self._MOD
        for offset in range(1, len(keys) + 1):
            if offset % 4096 == 0:
                self.budget.check("applying the patch", hint="regenerate the diff against the current file")
            for candidate in (expected - offset, expected + offset):
                if floor <= candidate <= limit and \
                        (prefix[candidate + n] - prefix[candidate] * shift) % mod == target and \
                        keys[candidate: candidate + n] == block:
                    return candidate
            if expected - offset < floor and expected + offset > limit:
                break
        return None
