"""Workspace paths as the file operations take them: `/`-separated, relative (or under the guest's
/workspace), checked component by component before anything is opened."""

from __future__ import annotations

from collections.abc import Sequence

from wasm_runner.workspace.file_errors import InvalidPathError, PathEscapeError
from wasm_runner_protocol.guest import GUEST_WORKSPACE

GUEST_ROOT = GUEST_WORKSPACE
"""How the guest names the workspace; absolute paths under it are accepted."""
MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255




def split_path(path: str, *, what: str = "path") -> tuple[str, ...]:
    """The components of a workspace path; refuses anything that could leave the workspace.

    Accepted: relative paths (`a/b.txt`, `./a`), and absolute paths under /workspace
    (the guest's name for it). `.` and empty components are dropped; `..` is refused
    outright (even where it would stay inside) so no caller ever needs to reason about it.
    """
    if not isinstance(path, str):
        raise InvalidPathError(str(path), f"the {what} must be a string")
    if "\x00" in path:
        raise InvalidPathError(path, f"the {what} contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise InvalidPathError(path[:64] + "…", f"the {what} is longer than {MAX_PATH_CHARS} characters")
    original = path
    if path.startswith("/"):
        if path == GUEST_ROOT or path.startswith(GUEST_ROOT + "/"):
            path = path[len(GUEST_ROOT):]
        else:
            raise PathEscapeError(path, f"the {what} {path!r} is outside the workspace",
                                  "use a path relative to the workspace, or one under /workspace")
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    for part in parts:
        if part == "..":
            raise PathEscapeError(original, f"the {what} {original!r} contains '..'", "paths may not go up a directory")
        try:
            encoded = part.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPathError(path, f"the {what} is not valid UTF-8") from None
        if len(encoded) > MAX_NAME_BYTES:
            raise InvalidPathError(path, f"a component of the {what} is longer than {MAX_NAME_BYTES} bytes")
    return parts


def join(parts: Sequence[str]) -> str:
    return "/".join(parts)
