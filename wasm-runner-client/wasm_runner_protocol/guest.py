"""What a guest sees, and the names both sides check: guest paths, identifiers, file extensions.

The client, the service and the core take these from here, so a rule is written once. The
guest-side drivers (wasm_runner/_runtimes) cannot import the host's code and keep their own
copies of the paths.
"""

from __future__ import annotations

import re
from typing import Annotated

from msgspec import Meta

__all__ = [
    "EXTENSION_LANGUAGES", "GUEST_TMP", "GUEST_WORKSPACE", "NAME_PATTERN", "ONESHOT_PREFIX",
    "PROFILE_NAME_PATTERN", "SESSION_ID_PATTERN", "SHARED_GUEST", "WORKSPACE_NAME_PATTERN", "SessionId",
    "check_guest_path", "is_session_id", "language_for_path",
]

GUEST_WORKSPACE = "/workspace"
"""The session's directory, and the guest's working directory."""
GUEST_TMP = "/tmp"
SHARED_GUEST = f"{GUEST_WORKSPACE}/shared"
"""Where a workspace's shared directory appears in its members' sessions."""

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}\Z"
"""Identifier patterns end in \\Z, never $: Python's re (msgspec's too) lets $ match before a final
newline ("abc\\n" would pass). The JSON Schemas turn \\Z back into $, which means the end of the
text in their ECMA-262 dialect (see `wasm_runner_protocol.wire.ecma_patterns`)."""
SESSION_ID_PATTERN = NAME_PATTERN
WORKSPACE_NAME_PATTERN = NAME_PATTERN
PROFILE_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}\Z"
ONESHOT_PREFIX = "oneshot-"
"""Session ids of the service's one-shot runs; a caller cannot open a session by such an id."""

SESSION_ID_RULE = "1-64 letters, digits, '-' or '_'"
SessionId = Annotated[str, Meta(pattern=SESSION_ID_PATTERN, description=SESSION_ID_RULE)]

_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def is_session_id(value: str) -> bool:
    """1-64 ASCII letters, digits, '-' or '_' (nothing else, no final newline)."""
    return _SESSION_ID.match(value) is not None


_RESERVED_GUEST_PATHS = ("", GUEST_WORKSPACE, GUEST_TMP)


def check_guest_path(path: str) -> str:
    """`path` without a trailing '/', if a mount may be shown there: absolute, not /, /workspace or
    /tmp themselves, no '..' part (a path below them, e.g. /workspace/shared, is fine). Raises
    ValueError saying so otherwise."""
    if not isinstance(path, str) or not path.startswith("/") or path.rstrip("/") in _RESERVED_GUEST_PATHS \
            or ".." in path.split("/") or "\0" in path:
        raise ValueError(f"a mount's guest path must be absolute, other than /, {GUEST_WORKSPACE} and "
                         f"{GUEST_TMP}, without '..' (got {path!r})")
    return path.rstrip("/")


EXTENSION_LANGUAGES: dict[str, str] = {
    ".py": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".sh": "bash", ".bash": "bash",
}
"""File extension (lower case) to the language that runs it."""


def language_for_path(path: str) -> str | None:
    """The language of a file by its extension, case-insensitively; None if it has no known one."""
    dot = path.rfind(".")
    return EXTENSION_LANGUAGES.get(path[dot:].lower()) if dot != -1 else None
