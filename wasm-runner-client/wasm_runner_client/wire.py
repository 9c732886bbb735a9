"""The HTTP API's bodies as the client sends and receives them.

They are the service's own definitions (wasm_runner_protocol), so the client and the
server cannot drift apart; only `OutputChunk`, what a streamed execution yields to
the caller, is the client's.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from wasm_runner_protocol.processes import (
    PreviewLink,
    PreviewLinkBody,
    ProcessExit,
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    ProcessSignal,
    ProcessStart,
    ProcessStdin,
    ProcessStdinResult,
)
from wasm_runner_protocol.wire import (
    Base64File,
    CancelResult,
    ConsoleLink,
    DeleteResult,
    EditResult,
    ErrorDetail,
    ErrorResponse,
    ExecBody,
    FileEdit,
    FileEntry,
    FileListing,
    GlobResult,
    GrepMatch,
    GrepResult,
    Health,
    LimitsPatch,
    MountInfo,
    OneShotBody,
    OneShotResult,
    OutputFile,
    PresignBody,
    PresignResult,
    ProcessBody,
    ProfileInfo,
    ProfileList,
    Readiness,
    SessionCreate,
    SessionFork,
    SessionForkResult,
    SessionInfo,
    SessionList,
    SessionPatch,
    StarterInfo,
    StarterList,
    TemplateCreate,
    TemplateInfo,
    TemplateList,
    TextEdit,
    UploadResult,
    WriteResult,
)

__all__ = [
    "Base64File", "CancelResult", "ConsoleLink", "DeleteResult", "EditResult", "ErrorDetail", "ErrorResponse", "ExecBody",
    "FileEdit", "FileEntry", "FileListing", "GlobResult", "GrepMatch", "GrepResult", "Health", "LimitsPatch",
    "MountInfo", "OneShotBody", "OneShotResult", "OutputChunk", "OutputFile", "PresignBody", "PresignResult",
    "PreviewLink", "PreviewLinkBody", "ProcessBody", "ProcessExit", "ProcessInfo", "ProcessList", "ProcessOutput",
    "ProcessSignal", "ProcessStart", "ProcessStdin", "ProcessStdinResult", "ProfileInfo", "ProfileList", "Readiness",
    "SessionCreate", "SessionFork", "SessionForkResult", "SessionInfo", "SessionList", "SessionPatch",
    "StarterInfo", "StarterList", "TemplateCreate", "TemplateInfo", "TemplateList", "TextEdit", "UploadResult", "WriteResult",
]


class OutputChunk(msgspec.Struct, frozen=True):
    """Output as it happened, from a streamed execution."""

    stream: Literal["stdout", "stderr"]
    text: str
