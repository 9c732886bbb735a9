"""The HTTP API's bodies as the client sends and receives them.

Field names are those of the service's wire (server/wire.py); the execution result is
the core's `ExecResult`, reused as is. The core never imports the server, so the
shapes the client needs are declared here. Responses are decoded leniently: a field a
newer server adds is ignored, never an error. Requests leave out what the caller left
out, so the server's profile and defaults apply.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from wasm_runner.api import ExecResult, Language, Limits

__all__ = [
    "Base64File", "CancelResult", "DeleteResult", "EditResult", "ErrorDetail", "ErrorResponse", "ExecBody",
    "FileEdit", "FileEntry", "FileListing", "GlobResult", "GrepMatch", "GrepResult", "Health", "LimitsPatch",
    "MountInfo", "OneShotBody", "OneShotResult", "OutputChunk", "OutputFile", "PresignBody", "PresignResult", "ProcessBody", "ProfileInfo",
    "ProfileList", "Readiness", "SessionCreate", "SessionInfo", "SessionList", "TextEdit", "UploadResult",
    "WriteResult",
]


class _Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A request body: fields left at their default are not sent."""


# -- errors -----------------------------------------------------------------------------


class ErrorDetail(msgspec.Struct, kw_only=True):
    code: str
    message: str
    hint: str | None = None


class ErrorResponse(msgspec.Struct, kw_only=True):
    error: ErrorDetail


# -- execution ----------------------------------------------------------------------------


class LimitsPatch(_Request):
    """Limits for one call; fields left out come from the profile, then the server defaults."""

    timeout_s: float | UnsetType = UNSET
    fuel: int | None | UnsetType = UNSET
    """None runs unmetered (where the server allows it)."""
    memory_bytes: int | UnsetType = UNSET
    output_bytes: int | UnsetType = UNSET
    disk_bytes: int | UnsetType = UNSET
    disk_files: int | UnsetType = UNSET

    @classmethod
    def from_limits(cls, limits: Limits) -> LimitsPatch:
        """Every field of a core `Limits`, sent explicitly."""
        return cls(**msgspec.structs.asdict(limits))


class ExecBody(_Request):
    language: Language | UnsetType = UNSET
    code: str | None = None
    path: str | None = None
    stdin: str = ""
    env: dict[str, str] = {}
    limits: LimitsPatch | None = None
    fresh: bool = False
    profile: str | None = None
    id: str | None = None


class ProcessBody(_Request):
    command: list[str]
    stdin: str = ""
    env: dict[str, str] = {}
    limits: LimitsPatch | None = None
    profile: str | None = None
    id: str | None = None


class Base64File(_Request):
    """File contents as base64 (msgspec encodes `bytes` as base64)."""

    base64: bytes


class OneShotBody(_Request):
    language: Language | UnsetType = UNSET
    code: str | None = None
    path: str | None = None
    command: list[str] | None = None
    stdin: str = ""
    env: dict[str, str] = {}
    limits: LimitsPatch | None = None
    profile: str | None = None
    id: str | None = None
    files: dict[str, str | Base64File] = {}
    outputs: list[str] = []


class OutputFile(msgspec.Struct, kw_only=True):
    size: int
    encoding: Literal["utf-8", "base64", "none"]
    content: str = ""
    omitted: str | None = None

    @property
    def data(self) -> bytes:
        """The file's bytes (empty when it was left out; see `omitted`)."""
        if self.encoding == "base64":
            import base64

            return base64.b64decode(self.content)
        return self.content.encode("utf-8")


class OneShotResult(ExecResult, kw_only=True):
    output_files: dict[str, OutputFile] = {}
    missing_outputs: list[str] = []


class OutputChunk(msgspec.Struct, frozen=True):
    """Output as it happened, from a streamed execution."""

    stream: Literal["stdout", "stderr"]
    text: str


# -- sessions -------------------------------------------------------------------------------


class SessionCreate(_Request):
    id: str | None = None
    profile: str | None = None
    idle_timeout_s: float | None = None
    ttl_s: float | None = None
    metadata: dict[str, str] = {}
    ephemeral: bool = False


class SessionInfo(msgspec.Struct, kw_only=True):
    id: str
    profile: str
    state: str
    """new, running, live or hibernated."""
    kernels: list[str]
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    idle_timeout_s: float
    ttl_s: float
    executions: int
    metadata: dict[str, str]


class SessionList(msgspec.Struct, kw_only=True):
    sessions: list[SessionInfo]
    next_cursor: str | None = None


class CancelResult(msgspec.Struct, kw_only=True):
    cancelled: bool


# -- files ---------------------------------------------------------------------------------


class PresignBody(_Request):
    method: Literal["GET", "PUT"] = "GET"
    expires_in: float | None = None


class PresignResult(msgspec.Struct, kw_only=True):
    url: str
    """Absolute here (the client joins the server's path to its base URL): use it without a key."""
    method: str
    expires_at: float
    expires_in: float


class FileEntry(msgspec.Struct, kw_only=True):
    path: str
    type: str
    """file, directory, symlink or other."""
    size: int
    mtime: datetime


class FileListing(msgspec.Struct, kw_only=True):
    path: str
    entries: list[FileEntry]
    truncated: bool = False


class GlobResult(msgspec.Struct, kw_only=True):
    pattern: str
    matches: list[FileEntry]
    truncated: bool = False


class GrepMatch(msgspec.Struct, kw_only=True):
    path: str
    line: int
    text: str


class GrepResult(msgspec.Struct, kw_only=True):
    pattern: str
    matches: list[GrepMatch]
    files_searched: int
    truncated: bool = False
    timed_out: bool = False


class WriteResult(msgspec.Struct, kw_only=True):
    path: str
    size: int
    created: bool


class UploadResult(msgspec.Struct, kw_only=True):
    files: list[WriteResult]


class DeleteResult(msgspec.Struct, kw_only=True):
    path: str
    type: str


class TextEdit(_Request):
    old_text: str
    new_text: str
    replace_all: bool = False


class FileEdit(_Request):
    old_text: str | None = None
    new_text: str | None = None
    replace_all: bool = False
    edits: list[TextEdit] | None = None
    patch: str | None = None


class EditResult(msgspec.Struct, kw_only=True):
    path: str
    size: int
    replacements: int = 0
    hunks: int = 0


# -- profiles and health ----------------------------------------------------------------------


class MountInfo(msgspec.Struct, kw_only=True):
    guest: str
    read_only: bool = True


class ProfileInfo(msgspec.Struct, kw_only=True):
    name: str
    description: str
    language: str
    provider: str | None
    limits: Limits
    mounts: list[MountInfo]
    env_allowlist: list[str]
    network: str


class ProfileList(msgspec.Struct, kw_only=True):
    default: str
    profiles: list[ProfileInfo]
    max_limits: Limits


class Health(msgspec.Struct, kw_only=True):
    status: str = "ok"


class Readiness(msgspec.Struct, kw_only=True):
    ready: bool
    checks: dict[str, str]
