"""Removing the read-only trees the package code makes (directories 0555, files 0444)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def remove_read_only_tree(path: Path) -> None:
    """Remove a tree made read-only (links never followed)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    for dirpath, _dirnames, _ in os.walk(path):
        os.chmod(dirpath, 0o700)
    shutil.rmtree(path, ignore_errors=True)
