"""What the docs tests share: the site's folder, its Markdown code blocks, and the reference generator."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def code_blocks(page: Path, language: str) -> list[str]:
    """The fenced code blocks of `page` in `language`, in order."""
    return [body for lang, body in _FENCE.findall(page.read_text()) if lang == language]


def references() -> ModuleType:
    """docs/hooks/references.py, the MkDocs hook that generates the reference pages."""
    spec = importlib.util.spec_from_file_location("docs_references", DOCS / "hooks" / "references.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
