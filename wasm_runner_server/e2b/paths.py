"""E2B's paths and the sandbox's: a sandbox's files are its session's workspace, /workspace.

E2B templates put the user's home at /home/user, and E2B code often names it; the gateway reads it
as another name for /workspace (also the sandbox's $HOME and working directory). A relative path is
relative to it. Any other absolute path, or one going up with `..`, is refused before any call.
"""

from __future__ import annotations

from wasm_runner.workspace.file_errors import FileOpError
from wasm_runner.workspace.relpaths import split_path
from wasm_runner_server.e2b.connect_rpc import RpcError

HOME = "/workspace"
E2B_HOME = "/home/user"


def relative(path: str, *, what: str = "path") -> str:
    """The workspace-relative form of an E2B path ('' for the workspace itself)."""
    if path == E2B_HOME or path.startswith(E2B_HOME + "/"):
        path = HOME + path[len(E2B_HOME):]
    try:
        return "/".join(split_path(path, what=what))
    except FileOpError as exc:
        raise RpcError("invalid_argument", f"{exc.message}: a sandbox's files are under {HOME} "
                                           f"({E2B_HOME} is another name for it)") from None


def absolute(relative_path: str) -> str:
    """The path the SDK is shown: under /workspace, where commands see the same file."""
    return f"{HOME}/{relative_path}" if relative_path else HOME
