"""Where a session's /workspace is when it is not a directory of the session's own (a disk layout).

The access policy decides it when the session is created (`security.disk_layouts`); the session
manager asks it, by session id, each time it opens the session's core object.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wasm_runner_protocol.guest import GUEST_WORKSPACE


@dataclass(frozen=True)
class SessionDisk:
    files: Path | None = None
    """The host directory the guest sees as /workspace (None: the session's own `files/`)."""
    workdir: str = ""
    """The guest's working directory under /workspace ("" for /workspace itself)."""
    owned: bool = True
    """The files go with the session when it is removed (its own directory, an end user's session
    root); False for a disk that outlives it (a member's)."""
    guest_root: str = GUEST_WORKSPACE
    """Where the guest's working directory is taken from: /workspace, or the layout's `guest_path`."""


OWN_DIRECTORY = SessionDisk()
"""Today's layout: the session's own directory, /workspace its working directory."""
