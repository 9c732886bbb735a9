"""Every request and response body of the HTTP API, as msgspec Structs.

These are the only definitions of the wire: the service's handlers decode into them
and encode from them, /openapi.json and the MCP tool schemas are generated from them,
and the client (wasm_runner.client) sends and decodes them. The execution result
itself is `ExecResult` (wasm_runner.api), reused as is. Request bodies refuse unknown
fields; responses do not, so an older client ignores what a newer server adds.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Annotated, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.execution import MAX_LIMIT, ExecResult, Harness, Language, Limits, TypeCheck
from wasm_runner_protocol.guest import NAME_PATTERN, PROFILE_NAME_PATTERN
from wasm_runner_protocol.guest import SESSION_ID_PATTERN as SESSION_ID_PATTERN  # re-exported
from wasm_runner_protocol.guest import SessionId as SessionId  # re-exported
from wasm_runner_protocol.packages import PackageRequest
from wasm_runner_protocol.tools import ToolSpec

T = TypeVar("T")

ProfileName = Annotated[str, Meta(pattern=PROFILE_NAME_PATTERN)]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")]
EnvMap = Annotated[dict[EnvName, Annotated[str, Meta(max_length=32768)]], Meta(max_length=256)]
Seconds = Annotated[float, Meta(gt=0, le=10 * 365 * 86400)]
Tag = Annotated[str, Meta(max_length=256)]


def ecma_patterns(schema: T) -> T:
    """`schema` (a JSON Schema or OpenAPI document, changed in place) with the Python end anchor of
    every `pattern` written as JSON Schema's own: \\Z there would be a literal Z or a syntax error."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str) and value.endswith(r"\Z"):
                schema[key] = value[:-2] + "$"
            else:
                ecma_patterns(value)
    elif isinstance(schema, list):
        for value in schema:
            ecma_patterns(value)
    return schema


EgressShorthand = Literal["deny", "open"]
"""A network policy's mode alone, as the config file writes it: `"egress": "open"`."""


class _Body(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Request bodies: unknown fields are an error, not silently ignored."""

    def __post_init__(self) -> None:
        # An `egress` given as its mode alone is the policy of that mode: readers see a policy only.
        egress = getattr(self, "egress", None)
        if egress == "deny" or egress == "open":
            setattr(self, "egress", EgressPolicy(mode=egress))  # noqa: B010 - the field is the subclass's


# -- errors ---------------------------------------------------------------------------


class ErrorDetail(msgspec.Struct, kw_only=True):
    code: str
    """Stable, machine-readable (e.g. `session_not_found`, `path_escape`)."""
    message: str
    """What went wrong, for a person."""
    hint: str | None = None
    """What to do about it, when there is something to do."""


class ErrorResponse(msgspec.Struct, kw_only=True):
    """The one error shape of the service, for every 4xx and 5xx."""

    error: ErrorDetail


# -- limits and execution -------------------------------------------------------------------


class LimitsPatch(_Body):
    """Limits for one call; fields left out come from the profile, then the server defaults.
    Each must stay within the server's maxima (GET /v1/profiles shows them)."""

    timeout_s: Annotated[float, Meta(gt=0, le=3600)] | UnsetType = UNSET
    fuel: Annotated[int, Meta(gt=0, le=MAX_LIMIT)] | None | UnsetType = UNSET
    """null runs unmetered."""
    memory_bytes: Annotated[int, Meta(ge=32 * 1024 * 1024, le=MAX_LIMIT)] | UnsetType = UNSET
    output_bytes: Annotated[int, Meta(ge=0, le=MAX_LIMIT)] | UnsetType = UNSET
    disk_bytes: Annotated[int, Meta(ge=0, le=MAX_LIMIT)] | UnsetType = UNSET
    disk_files: Annotated[int, Meta(ge=0, le=MAX_LIMIT)] | UnsetType = UNSET

    @classmethod
    def from_limits(cls, limits: Limits) -> LimitsPatch:
        """Every field of a core `Limits`, sent explicitly."""
        return cls(**msgspec.structs.asdict(limits))


class ExecBody(_Body):
    """Run code in a session: `code`, or `path` naming a workspace file to run."""

    language: Language | UnsetType = UNSET
    """Defaults to the profile's language (or the file extension of `path`)."""
    code: Annotated[str, Meta(max_length=4 * 1024 * 1024)] | None = None
    path: Annotated[str, Meta(max_length=4096)] | None = None
    stdin: str = ""
    env: EnvMap = {}
    limits: LimitsPatch | None = None
    fresh: bool = False
    """Run in a new instance instead of the session's kernel (no state kept)."""
    profile: ProfileName | None = None
    """Defaults to the session's profile."""
    harness: Harness = "script"
    """`check` runs the code, then `tests` against it, and sets the result's verdict."""
    tests: Annotated[str, Meta(max_length=4 * 1024 * 1024)] = ""
    id: Tag | None = None
    """Correlation id echoed in the result."""
    typecheck: TypeCheck = False
    """TypeScript: type-check the program with tsc first; the result's `diagnostics` lists the findings.
    `"block"`: a program with type errors does not run."""
    typecheck_timeout_s: Annotated[float, Meta(gt=0, le=600)] = 60.0
    """The type check's own time limit."""
    egress: EgressPolicy | EgressShorthand | None = None
    """This call's network policy, narrower than the session's (default: the session's); a wider one is
    refused with 403 network_not_allowed."""
    tools: Annotated[list[ToolSpec], Meta(max_length=64)] | None = None
    """Caller-side tools the code may call (code mode): the call must take the event stream
    (`Accept: text/event-stream`), where each call the service allows arrives as a `tool_call` event
    to answer with POST /v1/sessions/{id}/tool-calls/{call_id}."""


class ProcessBody(_Body):
    """Run a program natively (bubblewrap) in the session's workspace."""

    command: Annotated[list[Annotated[str, Meta(max_length=65536)]], Meta(min_length=1, max_length=4096)]
    stdin: str = ""
    env: EnvMap = {}
    limits: LimitsPatch | None = None
    profile: ProfileName | None = None
    id: Tag | None = None
    egress: EgressPolicy | EgressShorthand | None = None
    """This call's network policy, narrower than the session's (default: the session's); a wider one is
    refused with 403 network_not_allowed."""


class Base64File(_Body):
    """File contents given as base64 (for bytes that are not UTF-8 text)."""

    base64: bytes


class OneShotBody(_Body):
    """Run once in a throwaway workspace seeded with `files`, returning the `output_files` asked for."""

    language: Language | UnsetType = UNSET
    code: Annotated[str, Meta(max_length=4 * 1024 * 1024)] | None = None
    path: Annotated[str, Meta(max_length=4096)] | None = None
    """Run this file (one of `files`) instead of `code`."""
    command: Annotated[list[Annotated[str, Meta(max_length=65536)]], Meta(min_length=1, max_length=4096)] | None = None
    """Run a program natively instead of code (needs the native provider)."""
    stdin: str = ""
    env: EnvMap = {}
    limits: LimitsPatch | None = None
    profile: ProfileName | None = None
    id: Tag | None = None
    files: Annotated[dict[Annotated[str, Meta(min_length=1, max_length=4096)], str | Base64File],
                     Meta(max_length=1000)] = {}
    """Workspace path -> text, or {"base64": ...} for bytes."""
    output_files: Annotated[list[Annotated[str, Meta(min_length=1, max_length=4096)]], Meta(max_length=100)] = []
    """Workspace paths or glob patterns to return after the run (e.g. "output.png", "out/*.csv"), in the
    result's `output_files`."""
    outputs: Annotated[list[Annotated[str, Meta(min_length=1, max_length=4096)]],
                       Meta(max_length=100, extra_json_schema={"deprecated": True})] = []
    """Deprecated, accepted until the next minor version: the old name of `output_files` (a result's
    `outputs` are display outputs, figures and the like). Read as `output_files`; not both at once."""
    typecheck: TypeCheck = False
    """TypeScript: type-check the program with tsc first; the result's `diagnostics` lists the findings.
    `"block"`: a program with type errors does not run."""
    typecheck_timeout_s: Annotated[float, Meta(gt=0, le=600)] = 60.0
    egress: EgressPolicy | EgressShorthand | None = None
    """This run's network policy, narrower than the profile's (default: the profile's); a wider one is
    refused with 403 network_not_allowed."""
    tools: Annotated[list[ToolSpec], Meta(max_length=64)] | None = None
    """Caller-side tools the code may call (code mode): the call must take the event stream, which opens
    with a `run` event (the run's id), then each call the service allows arrives as a `tool_call` event
    to answer with POST /v1/exec/{run_id}/tool-calls/{call_id}."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.outputs:  # the deprecated name: readers see `output_files` only
            if self.output_files:
                raise ValueError("give the files to return as `output_files` only (`outputs` is its deprecated "
                                 "old name)")
            self.output_files, self.outputs = self.outputs, []


class OutputFile(msgspec.Struct, kw_only=True, omit_defaults=True):
    size: int
    encoding: Literal["utf-8", "base64", "none"]
    """"none" when the file was left out (see `omitted`)."""
    content: str = ""
    omitted: str | None = None
    """Why the content is not included (over the size budget for outputs)."""

    @property
    def data(self) -> bytes:
        """The file's bytes (empty when it was left out; see `omitted`)."""
        return base64.b64decode(self.content) if self.encoding == "base64" else self.content.encode("utf-8")


class OneShotResult(ExecResult, kw_only=True):
    """The execution result plus the requested output files."""

    output_files: dict[str, OutputFile] = {}
    missing_outputs: list[str] = []
    """Requested paths or patterns that matched no file."""


class StreamChunk(msgspec.Struct):
    """The data of a `stdout` or `stderr` server-sent event."""

    text: str


# -- sessions ---------------------------------------------------------------------------


StarterName = Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9-]{0,63}\Z",
                                  description="a web starter: `vite-react` or `tanstack-start`")]
PathSegment = Annotated[str, Meta(pattern=NAME_PATTERN, description="1-64 letters, digits, '-' or '_'")]
"""A name that becomes one directory on the host (an agent, an end user)."""
TemplateName = Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}\Z",
                                   description="lower-case letters, digits, '.', '_' and '-'; at most 64")]


class SessionCreate(_Body):
    id: SessionId | None = None
    """Choose the id (e.g. a conversation id); by default one is generated."""
    profile: ProfileName | None = None
    idle_timeout_s: Seconds | None = None
    """Drop the kernel after this much idle time (files are kept)."""
    ttl_s: Seconds | None = None
    """Remove the session and its files this long after creation."""
    metadata: Annotated[dict[Annotated[str, Meta(max_length=128)], Annotated[str, Meta(max_length=1024)]],
                        Meta(max_length=32)] = {}
    temporary: bool = False
    """Start from nothing and leave no persistent trace: no shared/ folder, template or starter, no file
    history, no artifacts; its files are erased when it ends (deleted, expired, or the server stops), and
    the audit log keeps only that runs happened, with sizes and outcome, never code, output or paths."""
    ephemeral: bool = False
    """Deprecated alias of `temporary`."""
    packages: PackageRequest | None = None
    """Installed before the session is answered (e.g. `{"lock": ...}` exported from another session);
    a failed install answers 422 packages_failed and leaves no session."""
    egress: EgressPolicy | EgressShorthand | None = None
    """Where the session's runs may connect: within the profile's network policy (default: the profile's);
    a wider one is refused with 403 network_not_allowed."""
    template: TemplateName | None = None
    """Start from this template of the workspace (`POST /v1/templates`): its files, packages and kernel
    state, so the first call finds them ready."""
    tools: Annotated[list[Annotated[str, Meta(max_length=64)]], Meta(max_length=256)] | None = None
    """The only tool names the session's runs may use (code mode), within its profile's `tools`
    (a name outside them: 403 tool_not_allowed); null: the profile's."""
    starter: StarterName | None = None
    """Start with this web starter in /workspace: `vite-react` (Vite + React) or `tanstack-start`, the
    project's files plus its node_modules, installed once on the host and shared read-only, so
    `npm run dev` in a process works at once, with no install and no network (not with `template`)."""
    agent: PathSegment | None = None
    """Under the `member-disk` layout: the agent (expert) the session works for; it works in
    /workspace/<agent>/<session id> on the member's disk (default `default`)."""
    end_user: PathSegment | None = None
    """Under the `end-user` layout, required of app keys: the application's end user the session acts
    for; the session sees only its own root among that end user's."""


class SessionFork(_Body):
    """How many copies of a session to make."""

    count: Annotated[int, Meta(ge=1, le=64)] = 1


class ForkFailure(msgspec.Struct, kw_only=True):
    index: int
    error: str


class SessionForkResult(msgspec.Struct, kw_only=True):
    sessions: list[SessionInfo]
    """The new sessions: each a copy of the parent's files, packages, network policy and kernel state."""
    failed: list[ForkFailure] = []
    """Copies that could not be made (each is made whole or not at all), and why."""
    kernels: list[str] = []
    """Languages whose kernel state the copies carry (restored by each copy's first call)."""
    fresh_kernels: dict[str, str] = {}
    """Languages whose live kernel the copies start anew, and why (e.g. native kernels)."""


class TemplateCreate(_Body):
    """Publish a session's current state (files, packages, kernels) as a template of its workspace."""

    name: TemplateName
    session: SessionId


class TemplateInfo(msgspec.Struct, kw_only=True):
    name: str
    created_at: datetime
    bytes: int
    """Disk the template takes (counted against the workspace's quota)."""
    kernels: list[str] = []
    """Languages whose kernel state it holds."""
    fresh_kernels: dict[str, str] = {}
    """Languages whose live kernel it could not hold, and why."""


class TemplateList(msgspec.Struct, kw_only=True):
    templates: list[TemplateInfo]


class StarterInfo(msgspec.Struct, kw_only=True):
    """A web starter a session can start with (`POST /v1/sessions {"starter": name}`)."""

    name: str
    description: str
    dev_command: list[str]
    """Starts its dev server, as a background process in the session."""
    port: int
    """The port the dev server listens on: open a preview of it."""
    ready: bool
    """Its node_modules are installed on this server; a starter not ready answers 503 at session creation."""


class StarterList(msgspec.Struct, kw_only=True):
    starters: list[StarterInfo]


class ConsoleLink(msgspec.Struct, kw_only=True):
    url: str
    """Open it in a browser within ten minutes: it signs the console in as the key that asked, once."""
    expires_at: float


class SessionPatch(_Body):
    """A change to a live session, effective from its next call."""

    egress: EgressPolicy | EgressShorthand | None | UnsetType = UNSET
    """The session's network policy: within its profile's (a wider one is refused with 403
    network_not_allowed, naming the profiles that allow it); null goes back to the profile's."""
    expires_in_s: Seconds | UnsetType = UNSET
    """End the session this long from now (its TTL, counted from its creation, becomes what that
    takes; the server's maximum TTL still bounds it): longer or shorter than before."""


class SessionInfo(msgspec.Struct, kw_only=True):
    id: str
    profile: str
    state: Literal["active", "idle", "hibernated"]
    """active: a call runs or waits, or a background process (a dev server) runs; idle: nothing runs (a
    kernel may hold state in memory, or the session is new); hibernated: idle past its idle timeout, its
    kernels saved with its files and out of memory (the next call restores them)."""
    kernels: list[str]
    """Languages with a live kernel."""
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    idle_timeout_s: float
    ttl_s: float
    executions: int
    metadata: dict[str, str]
    egress: EgressPolicy = EgressPolicy()
    """The session's network policy now: its profile's unless changed (PATCH /v1/sessions/{id})."""
    tools: list[str] | None = None
    """The tool names its runs may use, as chosen at creation (null: its profile's allowlist)."""
    cwd: str = "/workspace"
    """Where its runs start: /workspace, or /workspace/<agent>/<session id> on a member's disk."""
    durability: Literal["node", "call", "checkpoint"] = "node"
    """What outlives its node: node: nothing (its files and kernels are on one node's disk); call: what every
    answered request changed (stored before the answer); checkpoint: what was stored at the last checkpoint."""
    durability_window_s: float | None = None
    """checkpoint: the longest time its answered changes wait to be stored (what a node's death may lose)."""


class SessionList(msgspec.Struct, kw_only=True):
    sessions: list[SessionInfo]
    next_cursor: str | None = None
    """Pass as `cursor` for the next page; null on the last page."""


class CancelResult(msgspec.Struct, kw_only=True):
    cancelled: bool
    """True when an execution was running and has been stopped."""


# -- files -------------------------------------------------------------------------------


class FileEntry(msgspec.Struct, kw_only=True):
    path: str
    type: Literal["file", "directory", "symlink", "other"]
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
    """True when max_matches, the scan cap or the time budget stopped the search."""
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


class TextEdit(_Body):
    old_text: Annotated[str, Meta(min_length=1)]
    new_text: str
    replace_all: bool = False


class FileEdit(_Body):
    """Exactly one of: `old_text` + `new_text` (one edit), `edits` (several, all or none), `patch` (a unified diff)."""

    old_text: Annotated[str, Meta(min_length=1)] | None = None
    new_text: str | None = None
    replace_all: bool = False
    edits: Annotated[list[TextEdit], Meta(min_length=1, max_length=1000)] | None = None
    patch: Annotated[str, Meta(min_length=1)] | None = None


class EditResult(msgspec.Struct, kw_only=True):
    path: str
    size: int
    replacements: int = 0
    hunks: int = 0


# -- profiles and health ------------------------------------------------------------------


class MountInfo(msgspec.Struct, kw_only=True):
    guest: str
    read_only: bool = True


class ProfileInfo(msgspec.Struct, kw_only=True):
    name: str
    description: str
    language: str
    provider: Literal["wasm", "native"] | None
    limits: Limits
    mounts: list[MountInfo]
    env_allowlist: list[str]
    network: EgressPolicy


class ProfileList(msgspec.Struct, kw_only=True):
    default: str
    profiles: list[ProfileInfo]
    max_limits: Limits
    """The most any request may ask for."""


class Health(msgspec.Struct, kw_only=True):
    status: Literal["ok"] = "ok"


class Readiness(msgspec.Struct, kw_only=True):
    ready: bool
    checks: dict[str, str]


# -- query strings ---------------------------------------------------------------------------


class _Query(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Query parameters, decoded leniently from strings ("true", "10")."""


PathParam = Annotated[str, Meta(max_length=4096)]
Limit = Annotated[int, Meta(ge=1, le=10_000)]


class SessionListQuery(_Query):
    cursor: Annotated[str, Meta(max_length=512)] | None = None
    limit: Annotated[int, Meta(ge=1, le=500)] = 50


class ListQuery(_Query):
    path: PathParam = ""
    """A directory (or file) in the workspace; the root by default."""
    recursive: bool = False
    limit: Limit = 1000


class GlobQuery(_Query):
    pattern: Annotated[str, Meta(min_length=1, max_length=4096)]
    """`*` and `?` stay within one path component, `**` spans any depth; `[abc]`, `{a,b}`."""
    limit: Limit = 1000


class GrepQuery(_Query):
    pattern: Annotated[str, Meta(min_length=1, max_length=4096)]
    """A regular expression (Python syntax), or literal text with fixed_string."""
    path: PathParam = ""
    glob: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None
    """Only files matching this glob (matched against the file name when it has no `/`)."""
    ignore_case: bool = False
    fixed_string: bool = False
    max_matches: Limit = 100


class ArchiveQuery(_Query):
    path: PathParam = ""
    format: Literal["zip", "tar.gz"] = "zip"


class PutQuery(_Query):
    mkdirs: bool = True
    """Create missing parent directories."""


class DeleteQuery(_Query):
    recursive: bool = False
    """Required to delete a non-empty directory."""


class UploadQuery(_Query):
    dir: PathParam = ""
    """Directory the uploaded files go into (each part's filename is relative to it)."""


# -- presigned links ----------------------------------------------------------------------


class PresignBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    method: Literal["GET", "PUT"] = "GET"
    expires_in: Annotated[float, Meta(gt=0)] | None = None
    """Seconds; default 3600 for GET and 600 for PUT, capped by the server maxima."""


class PresignResult(msgspec.Struct, kw_only=True):
    url: str
    """The link's absolute URL (on `[server] public_url`, else the address the request came to): no
    Authorization needed."""
    method: str
    expires_at: float
    expires_in: float


# -- artifacts: files published out of a session, immutable, kept past the session's TTL ------------


class ArtifactCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    path: Annotated[str, Meta(min_length=1, max_length=4096)]
    """The workspace file to publish, or a folder (published as an archive in `format`)."""
    name: Annotated[str, Meta(min_length=1, max_length=255)] | None = None
    """Default: the file's name (a folder's: its name plus the archive's suffix)."""
    note: Annotated[str, Meta(max_length=4096)] = ""
    media_type: Annotated[str, Meta(min_length=3, max_length=255, pattern=r"^[\w.+-]+/[\w.+-]+\Z")] | None = None
    """Default: guessed from the name."""
    format: Literal["zip", "tar.gz"] = "zip"
    """The archive format of a folder."""


class ArtifactInfo(msgspec.Struct, kw_only=True):
    id: str
    name: str
    media_type: str
    size: int
    sha256: str
    session: str | None
    """The session it was published from (which may since have expired)."""
    source_path: str | None
    """Its path in that session (null for an ephemeral session's)."""
    key_id: str
    """The key that published it."""
    note: str
    created_at: float
    expires_at: float | None
    """When retention removes it (null: kept until deleted)."""


class ArtifactList(msgspec.Struct, kw_only=True):
    artifacts: list[ArtifactInfo]
    next_cursor: str | None = None


class ArtifactListQuery(_Query):
    session: Annotated[str, Meta(max_length=128)] | None = None
    cursor: Annotated[str, Meta(max_length=512)] | None = None
    limit: Annotated[int, Meta(ge=1, le=500)] = 100


class ArtifactPresignBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    expires_in: Annotated[float, Meta(gt=0)] | None = None
    """Seconds; default 3600, capped by the server maximum."""


# -- file history: the versions of a file the API wrote, to diff ------------------------------------


class FileVersion(msgspec.Struct, kw_only=True):
    version: int
    sha256: str
    size: int
    source: Literal["api", "outside"]
    """`api`: what an API write left; `outside`: what the host found before a write, changed since by
    something else (the guest)."""
    method: str | None
    """The API write that left it (put, upload, edit) for `api` versions."""
    recorded_at: float


class HistoryQuery(_Query):
    path: Annotated[str, Meta(min_length=1, max_length=4096)]


class FileHistory(msgspec.Struct, kw_only=True):
    path: str
    versions: list[FileVersion]
    """Oldest first; the oldest may have been dropped past the session's bounds."""
    current_sha256: str | None
    """The file as it is now (null: gone, not a regular file, or larger than history keeps)."""
    changed_outside: bool
    """The file differs from the last version the host saw (the guest changed it since)."""


class VersionQuery(_Query):
    path: Annotated[str, Meta(min_length=1, max_length=4096)]
    version: Annotated[int, Meta(ge=1)]


class DiffQuery(_Query):
    path: Annotated[str, Meta(min_length=1, max_length=4096)]
    from_version: Annotated[int, Meta(ge=1)] | None = None
    """Default: the last version before `to_version`."""
    to_version: Annotated[int, Meta(ge=1)] | None = None
    """Default: the file as it is now."""
    context: Annotated[int, Meta(ge=0, le=1000)] = 3


class FileDiff(msgspec.Struct, kw_only=True):
    path: str
    from_version: int | None
    to_version: int | None
    """Null: the file as it is now."""
    diff: str
    """A unified diff (empty when the two are equal)."""
    binary: bool = False
    """The versions are not both UTF-8 text: no line diff."""
