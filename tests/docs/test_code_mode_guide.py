"""The code-mode guide's Python snippets run as written, and the agent loop prints what it says."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_pages import DOCS, code_blocks
from test_snippets import run_snippet

PAGE = DOCS / "guides" / "code-mode.md"


@pytest.mark.runtimes
@pytest.mark.parametrize("index", range(len(code_blocks(PAGE, "python"))))
def test_the_code_mode_snippets_run(index: int, tmp_path: Path) -> None:
    snippet = code_blocks(PAGE, "python")[index]
    done = run_snippet(snippet, tmp_path)
    assert done.returncode == 0, done.stderr  # the snippets assert what they show
    if "write_program" in snippet:
        assert done.stdout.splitlines() == ["closed 2: crash on start, crash on exit", "3 [2]"]
    if "typescript_stubs" in snippet and "write_program" not in snippet:
        assert "def close_issue(*, issue_id: int) -> str:" in done.stdout
        assert "closeIssue(args: { issue_id: number }): Promise<string>;" in done.stdout
