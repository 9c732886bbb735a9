"""The Python snippets of the guides run as written, and print what their comments say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import DOCS, ROOT, code_blocks

PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "wasm-runner-client"), os.environ.get("PYTHONPATH", "")])


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One snippet in a Python process of its own, as a reader would paste it (bounded in time)."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH})


def test_the_guides_have_python_snippets() -> None:
    assert code_blocks(DOCS / "guides" / "quick-start.md", "python")
    assert code_blocks(DOCS / "guides" / "library.md", "python")


@pytest.mark.runtimes
@pytest.mark.parametrize("page", [DOCS / "guides" / "quick-start.md", ROOT / "README.md"], ids=lambda p: p.name)
def test_the_library_quick_start_prints_what_it_says(page: Path, tmp_path: Path) -> None:
    (snippet,) = code_blocks(page, "python")
    done = run_snippet(snippet, tmp_path)
    assert done.returncode == 0, done.stderr
    # print(result.stdout, result.exit_code, result.duration_ms): "45\n", then " 0 <ms>"
    output, exit_line, value, limit = done.stdout.splitlines()
    assert output == "45"
    assert exit_line.split()[0] == "0" and float(exit_line.split()[1]) > 0
    assert (value, limit) == ("3", "timeout")


@pytest.mark.runtimes
@pytest.mark.parametrize("index", range(len(code_blocks(DOCS / "guides" / "library.md", "python"))))
def test_the_library_guide_snippets_run(index: int, tmp_path: Path) -> None:
    snippet = code_blocks(DOCS / "guides" / "library.md", "python")[index]
    done = run_snippet(snippet, tmp_path)
    assert done.returncode == 0, done.stderr  # the snippets assert what they show


@pytest.mark.runtimes
@pytest.mark.native
def test_the_background_process_snippet_answers(tmp_path: Path) -> None:
    (snippet,) = code_blocks(DOCS / "guides" / "background-processes.md", "python")
    done = run_snippet(snippet, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 b'HELLO\\n'"
