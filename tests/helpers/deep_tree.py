"""A directory tree deeper and longer than PATH_MAX, for the walks that must reach its bottom."""

import os
from pathlib import Path

DEPTH = 300
NAME = 250


def build_deep_tree(top: Path, depth: int = DEPTH, name_len: int = NAME, file_bytes: int = 10) -> None:
    """`depth` nested directories of `name_len`-character names, a small file in each: far past
    PATH_MAX, so only descriptor-relative calls reach the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            name = f"{level:04d}".ljust(name_len, "d")
            os.mkdir(name, dir_fd=fd)
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
            out = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(out, b"x" * file_bytes)
            os.close(out)
    finally:
        os.close(fd)
