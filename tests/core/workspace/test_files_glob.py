"""Glob patterns: what they match (against fnmatch's semantics per component), that no
pattern makes matching slow, and that a pattern with no meaning is a clear error."""

from __future__ import annotations

import fnmatch
import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasm_runner.workspace import files as wf
from wasm_runner.workspace.budget import Budget
from wasm_runner.workspace.file_errors import (
    BudgetExceededError,
    InvalidPathError,
    InvalidPatternError,
    OperationCancelledError,
    PathEscapeError,
)
from wasm_runner.workspace.globs import Glob


def matches(pattern: str, path: str) -> bool:
    return Glob(pattern).matches(path)


# -- semantics ---------------------------------------------------------------------------


@pytest.mark.parametrize("pattern, path, expected", [
    ("*.py", "a.py", True),
    ("*.py", "src/a.py", False),  # * stays within one component
    ("src/*.py", "src/a.py", True),
    ("**/*.py", "a.py", True),  # ** spans any depth, none included
    ("**/*.py", "src/pkg/a.py", True),
    ("src/**", "src/pkg/a.py", True),
    ("src/**", "src", False),
    ("src/**/c.py", "src/c.py", True),
    ("a**b", "axxb", True),  # ** inside a component is a *
    ("a**b", "ax/xb", False),
    ("?.txt", "a.txt", True),
    ("?.txt", "ab.txt", False),
    ("?", "/", False),
    ("[ab].txt", "b.txt", True),
    ("[a-c].txt", "c.txt", True),
    ("[a-c].txt", "d.txt", False),
    ("[!a].txt", "b.txt", True),
    ("[^a].txt", "a.txt", False),
    ("[]].txt", "].txt", True),  # ] first in a class is a member
    ("[!]].txt", "].txt", False),
    ("[a-].txt", "-.txt", True),  # - at the end is a member
    ("[\\].txt", "\\.txt", True),  # a backslash in a class is a member
    ("[ab", "[ab", True),  # an unclosed class is literal
    ("*.{md,txt}", "notes.txt", True),
    ("*.{md,txt}", "notes.rst", False),
    ("{a,b*}/x", "bzz/x", True),
    ("\\*.txt", "*.txt", True),  # a backslash escapes
    ("\\*.txt", "a.txt", False),
    ("a.b", "axb", False),  # regex characters are literal
    ("(a|b)+", "(a|b)+", True),
    ("$^.", "$^.", True),
    ("*", ".hidden", True),  # dotfiles match like any other name
    ("*", "line\nbreak", True),
    ("é?", "éà", True),
    ("/workspace/*.py", "a.py", True),  # the guest's absolute name for the workspace
    ("./a/./b", "a/b", True),
])
def test_what_a_pattern_matches(pattern, path, expected):
    assert matches(pattern, path) is expected


def test_a_name_that_is_not_utf8_on_disk_matches_as_one_character_per_stray_byte():
    name = b"a\xff.txt".decode("utf-8", "surrogateescape")  # how os.listdir names it
    assert matches("a?.txt", name) and matches("*.txt", name) and not matches("a.txt", name)


@pytest.mark.parametrize("pattern", ["[z-a]", "x/[b-a].txt", "{a,[9-0]}", "[!z-a]"])
def test_a_reversed_range_is_an_invalid_pattern(pattern):
    with pytest.raises(InvalidPatternError) as raised:
        Glob(pattern)
    assert "reversed" in raised.value.message and raised.value.hint


@pytest.mark.parametrize("pattern, error", [
    ("", InvalidPatternError), ("./", InvalidPatternError), ("../*", PathEscapeError),
    ("/etc/*", PathEscapeError), ("a\x00*", InvalidPathError), ("\udcff*", InvalidPathError),
])
def test_patterns_that_cannot_be_a_glob_are_refused(pattern, error):
    with pytest.raises(error):
        Glob(pattern)


# -- the same answers as fnmatch, component by component ------------------------------------

# (our spelling, fnmatch's spelling): fnmatch reads [^…] as literal and has no {…}
TOKENS = [("a", "a"), ("b", "b"), ("-", "-"), ("*", "*"), ("?", "?"), ("[ab]", "[ab]"), ("[!a]", "[!a]"),
          ("[^b]", "[!b]"), ("[a-b]", "[a-b]"), ("[-a]", "[-a]"), ("{a,b*}", "{a,b*}"), ("{,-}", "{,-}")]
segment_tokens = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=5)
pattern_segments = st.lists(st.one_of(segment_tokens, st.just([("**", "**")])), min_size=1, max_size=4)
paths = st.lists(st.text(alphabet="ab-", min_size=1, max_size=6), min_size=1, max_size=4)


def expand_braces(segment: str) -> list[str]:
    start = segment.find("{")
    if start == -1:
        return [segment]
    end = segment.index("}", start)
    return [alt for option in segment[start + 1: end].split(",")
            for alt in expand_braces(segment[:start] + option + segment[end + 1:])]


def reference(pattern: list[str], path: list[str]) -> bool:
    """`**` as a whole component: any number of components (at least one when it ends the
    pattern, as the path must go on); any other component: fnmatch on one component."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        first = 1 if not rest else 0
        return any(reference(rest, path[k:]) for k in range(first, len(path) + 1))
    if not path:
        return False
    return any(fnmatch.fnmatchcase(path[0], alt) for alt in expand_braces(head)) and reference(rest, path[1:])


@settings(max_examples=400, deadline=None)
@given(pattern_segments, paths)
def test_matching_agrees_with_fnmatch_per_component(segments, path):
    ours = "/".join("".join(t[0] for t in seg) for seg in segments)
    theirs = ["".join(t[1] for t in seg) for seg in segments]
    assert matches(ours, "/".join(path)) is reference(theirs, path), (ours, path)


# -- time ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stars", [6, 12, 40])
def test_no_pattern_makes_matching_slow(stars):
    # A backtracking translation took seconds for 6 stars on a 60-character name, x8 per star more.
    pattern = "*a" * stars + "*b"
    name = "a" * 4000
    started = time.monotonic()
    glob = Glob(pattern)
    assert not any(glob.matches(name[:n]) for n in range(60, 4000, 97))
    assert glob.matches(name + "b")
    assert time.monotonic() - started < 1.0


def test_a_long_pattern_of_alternatives_compiles_and_matches_quickly():
    pattern = "/".join("{" + ",".join(f"x{i}*" for i in range(40)) + "}" for _ in range(20))
    path = "/".join(f"x{k}" + "y" * 50 for k in range(20))
    started = time.monotonic()
    assert Glob(pattern).matches(path)
    assert time.monotonic() - started < 1.0


def test_glob_in_a_workspace_with_long_names_answers_quickly(tmp_path):
    files = wf.WorkspaceFiles(tmp_path)
    for i in range(100):
        files.write_text(f"d/{'a' * 200}{i}", "")
    started = time.monotonic()
    assert files.glob("**/" + "*a" * 20 + "*b").entries == []
    assert files.grep("x", glob="*a" * 20 + "*b").files_searched == 0
    assert time.monotonic() - started < 2.0


# -- budget -------------------------------------------------------------------------------


def test_a_glob_past_its_budget_stops_with_a_clear_error(tmp_path):
    files = wf.WorkspaceFiles(tmp_path)
    for i in range(50):
        files.write_text(f"d{i}/f.txt", "")
    with pytest.raises(BudgetExceededError) as raised:
        files.glob("**/*.py", budget=Budget(0))
    assert raised.value.code == "budget_exceeded" and "narrow" in raised.value.hint
    cancelled = Budget(60)
    cancelled.cancel()
    with pytest.raises(OperationCancelledError):
        files.glob("**/*.py", budget=cancelled)
    assert [e.path for e in files.glob("d1*/*.txt", budget=Budget(60)).entries] == ["d1/f.txt"] + [
        f"d{i}/f.txt" for i in range(10, 20)]


def test_the_reference_expands_braces_like_the_glob():
    # fnmatch has no braces: the reference expands them itself.
    assert sorted(expand_braces("x{a,b}{,c}")) == sorted("".join(p) for p in itertools.product(["xa", "xb"], ["", "c"]))
