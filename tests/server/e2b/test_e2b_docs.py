"""The E2B guide: its snippet runs as written against the service, and its parity table lists every public
method of the SDKs, each "works" or "partial" row naming a test of tests/server/e2b that exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from e2b import Sandbox
from e2b.sandbox_sync.commands.command import Commands
from e2b.sandbox_sync.commands.command_handle import CommandHandle
from e2b.sandbox_sync.commands.pty import Pty
from e2b.sandbox_sync.filesystem.filesystem import Filesystem
from e2b_code_interpreter import Sandbox as CodeSandbox

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "guides" / "e2b.md"
HERE = Path(__file__).parent
ROW = re.compile(r"^\| `([^`]+)` \| (works|partial|not supported) \|(.*)\| (.+) \|$")


def _public(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith(("e2b.", "e2b_code_interpreter")):
            names |= {n for n, v in vars(klass).items() if not n.startswith("_")
                      and (callable(v) or isinstance(v, (classmethod, staticmethod, property)))}
    return names


def _rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in GUIDE.read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(4).strip())
    return rows


def test_the_parity_table_lists_every_sdk_method():
    expected = {f"Sandbox.{n}" for n in _public(Sandbox)}
    expected |= {f"files.{n}" for n in _public(Filesystem)} | {f"commands.{n}" for n in _public(Commands)}
    expected |= {f"pty.{n}" for n in _public(Pty)} | {f"CommandHandle.{n}" for n in _public(CommandHandle)}
    expected |= set(vars(CodeSandbox)) & {n for n in _public(CodeSandbox) if n not in _public(Sandbox)}
    assert set(_rows()) == expected


def test_each_working_method_names_a_test_that_exists():
    for method, (status, tested_by) in _rows().items():
        if status == "not supported":
            continue
        if tested_by == "-":
            assert method in ("Sandbox.connection_config", "Sandbox.envd_api_url", "Sandbox.envd_direct_url",
                              "Sandbox.git"), f"{method} is {status} but names no test"
            continue
        file_name, test_name = tested_by.split("::")
        assert re.search(rf"^def {test_name}\(", (HERE / file_name).read_text(), re.M), tested_by


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_guides_snippet_runs_as_written(e2b_service, tmp_path):
    (snippet,) = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "6"]
