"""Glob patterns over workspace paths, compiled to RE2 (matching never backtracks)."""

from __future__ import annotations

import re

import re2

from wasm_runner.workspace.file_errors import InvalidPatternError
from wasm_runner.workspace.relpaths import join, split_path

_MAGIC = re.compile(r"(?<!\\)[*?\[{]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is the caller's error, answered, not logged
_RE2_OPTIONS.never_capture = True
_RE2_OPTIONS.dot_nl = True


def has_magic(part: str) -> bool:
    return _MAGIC.search(part) is not None


def unescape(part: str) -> str:
    return re.sub(r"\\(.)", r"\1", part)


class Glob:
    """A glob pattern compiled for matching `/`-separated relative paths.

    `*` and `?` stay within one component, `**` as a whole component spans any depth,
    `[abc]`, `[a-z]`, `[!a]` or `[^a]` and `{a,b}` as usual, a backslash escapes the next character.
    Matching runs on RE2, whose automaton never backtracks: its time is linear in the
    path's length whatever the pattern, so no pattern can make a match slow.
    """

    __slots__ = ("pattern", "parts", "source", "_compiled")

    def __init__(self, pattern: str, *, what: str = "pattern") -> None:
        self.pattern = pattern
        self.parts = split_path(pattern, what=what)
        if not self.parts:
            raise InvalidPatternError(pattern, f"the {what} is empty", "e.g. *.py or **/*.txt")
        self.source = glob_regex(join(self.parts))
        try:
            self._compiled = re2.compile(self.source, _RE2_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            raise InvalidPatternError(pattern, f"invalid glob pattern {pattern[:200]!r}: {reason}",
                                      "simplify the pattern") from None

    def matches(self, path: str) -> bool:
        try:
            return self._compiled.fullmatch(path) is not None
        except UnicodeEncodeError:  # a name that is not UTF-8 on disk: each stray byte is one character
            return self._compiled.fullmatch(_SURROGATE.sub("\ufffd", path)) is not None


def glob_regex(pattern: str) -> str:
    """The RE2 expression a glob pattern stands for, over `/`-separated relative paths.

    Raises InvalidPatternError for a pattern with no meaning (a reversed range such as `[z-a]`).
    """
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    out: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_component_regex(part, pattern) + ("" if last else "/"))
    return "".join(out)


def _component_regex(part: str, pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        if c == "\\" and i + 1 < n:
            out.append(re2.escape(part[i + 1]))
            i += 2
            continue
        if c == "*":
            while i + 1 < n and part[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and part[j] in "!^":
                j += 1
            if j < n and part[j] == "]":
                j += 1
            while j < n and part[j] != "]":
                j += 1
            if j >= n:
                out.append(re2.escape(c))
            else:
                out.append(_class_regex(part[i + 1: j], pattern))
                i = j
        elif c == "{":
            j = part.find("}", i)
            if j == -1:
                out.append(re2.escape(c))
            else:
                options = part[i + 1: j].split(",")
                out.append("(?:" + "|".join(_component_regex(o, pattern) for o in options) + ")")
                i = j
        else:
            out.append(re2.escape(c))
        i += 1
    return "".join(out)


def _class_regex(body: str, pattern: str) -> str:
    """`[body]` of a glob as an RE2 class: ranges checked, every character escaped, never `/`."""
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    items: list[str] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            low, high = body[k], body[k + 2]
            if low > high:
                raise InvalidPatternError(pattern, f"the range {low}-{high} in [{body}] is reversed",
                                          f"write it low to high: {high}-{low}")
            items.append(f"{re2.escape(low)}-{re2.escape(high)}")
            k += 3
        else:
            items.append(re2.escape(body[k]))
            k += 1
    return f"[^/{''.join(items)}]" if negate else f"[{''.join(items)}]"
