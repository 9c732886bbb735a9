"""The MCP tools' arguments and structured results: the HTTP wire's Structs plus the session they act on,
so a tool's input schema and the HTTP body it becomes are one definition."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from wasm_runner import ExecResult
from wasm_runner_protocol.execution import Harness
from wasm_runner_protocol.wire import (
    ArtifactCreate,
    ArtifactInfo,
    ExecBody,
    FileEdit,
    GlobQuery,
    GrepQuery,
    ListQuery,
    ProcessBody,
    PutQuery,
    SessionCreate,
    SessionId,
    SessionListQuery,
)

# -- tool arguments: the HTTP wire's Structs, plus the session they act on --------------------------

SessionArg = Annotated[SessionId, Meta(description="Another session to act on; by default this connection's.")]
WorkspacePath = Annotated[str, Meta(min_length=1, max_length=4096,
                                    description="A path in the workspace, relative to it (e.g. 'out/chart.png').")]


class ExecuteCodeArgs(ExecBody, kw_only=True):
    """Run code in the session's kernel (variables persist between calls) and its workspace."""

    harness: Annotated[Harness, Meta(description="'check' runs `code` (the program), then `tests` against it, "
                                                 "and gives a verdict")] = "script"
    tests: Annotated[str, Meta(description="With harness 'check': code that checks the program (e.g. asserts)",
                               max_length=4 * 1024 * 1024)] = ""
    session: SessionArg | None = None


class RunProcessArgs(ProcessBody, kw_only=True):
    """Run a program natively (bubblewrap) in the session's workspace, with the network its session's policy allows."""

    session: SessionArg | None = None


class ReadFileArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Read a workspace file."""

    path: WorkspacePath
    session: SessionArg | None = None


class WriteFileArgs(PutQuery, kw_only=True):
    """Create or replace a workspace file."""

    path: WorkspacePath
    content: Annotated[str, Meta(description="The file's text, or its bytes in base64 (with encoding 'base64')")]
    encoding: Literal["utf-8", "base64"] = "utf-8"
    session: SessionArg | None = None


class EditFileArgs(FileEdit, kw_only=True):
    """Edit a text file in the workspace."""

    path: WorkspacePath
    session: SessionArg | None = None


class ListFilesArgs(ListQuery, kw_only=True):
    """List a workspace directory."""

    session: SessionArg | None = None


class GlobArgs(GlobQuery, kw_only=True):
    """Find workspace paths by glob pattern."""

    session: SessionArg | None = None


class GrepArgs(GrepQuery, kw_only=True):
    """Search workspace file contents."""

    session: SessionArg | None = None


class PublishArtifactArgs(ArtifactCreate, kw_only=True):
    """Publish a workspace file (a folder: as an archive) as an artifact, kept past the session."""

    session: SessionArg | None = None


class SessionNewArgs(SessionCreate, kw_only=True):
    """Start a new session."""

    switch: Annotated[bool, Meta(description="Make it this connection's session (the default for later calls)")] = True


class SessionListArgs(SessionListQuery, kw_only=True):
    """List sessions."""


class InstallPackagesArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Install Python packages into the session: later code in it imports them (kernel and fresh runs)."""

    python: Annotated[list[Annotated[str, Meta(max_length=512)]],
                      Meta(max_length=64, description="Requirements, e.g. ['requests==2.32.3', 'pyyaml>=6']")] = []
    session: SessionArg | None = None


class ToolsApiArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The tools code in the session may call (its profile's MCP servers), as an API to write code against."""

    language: Annotated[Literal["python", "typescript"],
                        Meta(description="The API's form: a Python stub module or a TypeScript declaration")] = "python"
    session: SessionArg | None = None


class SessionResetArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Reset a session: start it again under the same id and profile, with no files and no kernels."""

    session: SessionArg | None = None


class SessionForkArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Copy a session (files, packages, network policy and variables) into new sessions."""

    session: SessionArg | None = None
    count: Annotated[int, Meta(ge=1, le=64, description="How many copies (1 to 64)")] = 1


# -- structured results -------------------------------------------------------------------------------


class ExecOutput(ExecResult, kw_only=True):
    """The execution result, the session it ran in, and the images returned as image content."""

    session: str
    images: list[str] = []
    full_output: dict[str, str] = {}
    """stdout/stderr -> the resource URI of its full text, when the result holds only its head and tail."""


class PublishedArtifact(ArtifactInfo, kw_only=True):
    """The artifact, and a link that downloads it without a key until `link_expires_at`."""

    url: str
    link_expires_at: float
