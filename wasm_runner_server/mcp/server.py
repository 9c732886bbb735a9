"""wasm-runner over MCP (the official `mcp` SDK): the HTTP API's sessions, executions and files as MCP tools.

Two transports share one implementation, `McpTools`, whose every tool is a call of the
HTTP API through wasm_runner_client.AsyncClient:

- streamable HTTP: `mount_mcp(app)` serves /mcp on the HTTP service itself. The route goes
  through the app's middlewares (the same API keys guard it), and each tool call forwards
  the MCP request's Authorization header to the HTTP API of the same server, so the key's
  workspace, session ownership, quotas, rate limit and audit apply exactly as over HTTP;
- stdio: `wasm-runner mcp` (mcp/stdio.py) serves one connection on stdin/stdout,
  calling a service it runs in-process on a private Unix socket, or a remote one (--url,
  with an API key).

Sessions: one MCP connection is one wasm-runner session by default, created on first
use (again if it expires), so files and kernels persist across tool calls. Every tool
takes an optional `session` naming another session of the caller's workspace. Over
stdio the connection is the process; over HTTP it is the MCP session (Mcp-Session-Id)
with the caller's credential; a stateless request (no MCP session) gets a new session
per call, whose id the result names. An MCP session belongs to the key that opened it:
with another key its id answers 404, as an unknown session does.

Tool input schemas are generated with msgspec from Structs derived from the HTTP wire's
own (wasm_runner_protocol/wire.py): `ExecuteCodeArgs` is `ExecBody` plus `session`, `harness` and
`tests`, and so on; the HTTP bodies are built from the same fields. Arguments decode
with msgspec as HTTP bodies do. Failures are MCP tool errors (isError) whose text is the
HTTP error's code, message and hint and whose structured content is the HTTP error body.
Images the code wrote (PNG, JPEG, SVG, GIF, WebP) come back as MCP image content.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import io
import logging
import mimetypes
import re
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Annotated, Any, Literal, TypeVar, cast
from urllib.parse import quote, unquote

import httpx
import mcp_types as types
import msgspec
from aiohttp import web
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from msgspec import Meta
from multidict import CIMultiDict

from wasm_runner import ExecResult
from wasm_runner_client import AsyncClient, AsyncExecStream
from wasm_runner_client.calls import AnswerTo, Call, file_path
from wasm_runner_client.errors import ApiError as ClientApiError
from wasm_runner_client.errors import ConflictError, NotFoundError, TransportError
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.execution import LIMIT_MESSAGES, Harness
from wasm_runner_protocol.guest import SESSION_ID_PATTERN
from wasm_runner_protocol.packages import InstallResult
from wasm_runner_protocol.processes import (
    PreviewLink,
    PreviewLinkBody,
    ProcessInfo,
    ProcessOutput,
    ProcessStart,
    ProcessStdin,
    ProcessStdinResult,
)
from wasm_runner_protocol.tools import ApprovalDecided, ApprovalDecision, ApprovalEvent, ToolCallEvent, ToolList
from wasm_runner_protocol.wire import (
    ArtifactCreate,
    ArtifactInfo,
    ArtifactPresignBody,
    EditResult,
    ExecBody,
    FileEdit,
    FileListing,
    GlobQuery,
    GlobResult,
    GrepQuery,
    GrepResult,
    ListQuery,
    PresignResult,
    ProcessBody,
    PutQuery,
    SessionCreate,
    SessionForkResult,
    SessionId,
    SessionInfo,
    SessionList,
    SessionListQuery,
    WriteResult,
    ecma_patterns,
)
from wasm_runner_server.errors import ApiError, from_validation
from wasm_runner_server.http.policy import LOCAL, PRINCIPAL
from wasm_runner_server.mcp.approvals import NO_ELICITATION, Ask, asker
from wasm_runner_server.mcp.processes import (
    PreviewUrlArgs,
    ProcessOutputArgs,
    SendInputArgs,
    StartProcessArgs,
    StopProcessArgs,
    describe_link,
    describe_output,
    describe_process,
)
from wasm_runner_server.mcp.rendering import MARKER_ROOM, bound_content, bound_structured, clip, share
from wasm_runner_server.mcp.settings import DEFAULT_MAX_RESULT_CHARS
from wasm_runner_server.sessions.service import CONFIG

T = TypeVar("T")
log = logging.getLogger("wasm_runner.server.mcp")

SERVER_NAME = "wasm-runner"
TIERS = (
    "Which tier for what (`profile` of a call or of session_new): 'python', 'javascript' and 'typescript' run in "
    "WebAssembly, start in milliseconds and suit fast pure code (the standard library, pure-Python packages); "
    "'python-data' is native CPython with pandas, numpy, matplotlib and the data stack (charts come back as "
    "images); 'bash' is a shell with command-line tools (or run_process with a command); 'node' is native "
    "Node.js (npm packages, builds)."
)
LIMITS = (
    "Limits by default: 10 s wall clock (limits.timeout_s, up to the server's maximum), 256 MiB memory (1 GiB "
    "for the native tools), 1 MiB of output per stream, 256 MiB of workspace disk. A result gives at most "
    "{bound} characters of text: longer output comes back as its head and tail with a count of what was cut, "
    "and the full text stays in the workspace (.outputs/), linked; write large output to a file and grep it."
)
MCP_PATH = "/mcp"
INSTRUCTIONS = (
    "A sandbox for running code and working with files. This connection has its own session: files in "
    "its workspace (the current directory, /workspace) and the variables of its Python and JavaScript "
    "kernels persist from one tool call to the next. Code runs in WebAssembly with hard limits on time, "
    "memory, output and disk, and reaches only the network its session's profile allows (none unless the "
    "profile says so; the host makes every connection and checks it); run_process runs native programs "
    "(bubblewrap) where the server has them, under the same network policy. start_process keeps a program "
    "running in the background (a dev server, a long job); process_output reads its output by offset, and "
    "preview_url gives the user a browser link to a port it listens on. Images the code writes (PNG, JPEG, "
    "SVG) are returned as images. Pass `session` to work in another session; session_new, session_list and "
    "session_reset manage them. " + TIERS + " " + LIMITS
)

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml",
               ".gif": "image/gif", ".webp": "image/webp"}
MAX_IMAGES = 8
"""Images returned with one result (the first ones, in path order)."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_INLINE_BYTES = 1024 * 1024
"""Largest file read_file returns inline; a larger one comes back as a presigned download link."""
MAX_CLIENTS = 64
"""HTTP clients kept, one per credential seen (least recently used closed first)."""
MAX_CONNECTIONS = 10_000
"""Connections remembered (connection -> its session); the oldest are forgotten first."""
STDIO = "stdio"
MAX_RESOURCE_BYTES = 64 * 1024 * 1024
"""Largest file resources/read answers (an execution's full output is at most its output limit)."""
FULL_OUTPUT_DIR = ".outputs"
"""Where output cut from a result is kept in full, in the session's workspace."""
RESOURCE_URI = re.compile(r"wasm-runner://sessions/([^/]+)/files/(.+)")
RESOURCE_NOT_FOUND = -32002
"""The JSON-RPC error code MCP gives an unknown resource."""


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


# -- the tools ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who is calling: the MCP connection (None when stateless) and its HTTP headers (None over stdio)."""

    connection: str | None
    headers: Mapping[str, str] | None = None
    ask: Ask | None = field(default=None, compare=False)
    """Puts a call waiting for approval to the MCP client (None: it cannot be asked, the call is refused)."""

    @property
    def authorization(self) -> str | None:
        """The Authorization header of an MCP-over-HTTP request: forwarded to the HTTP API as is."""
        return self.headers.get("authorization") if self.headers is not None else None


Content = list[types.TextContent | types.ImageContent | types.EmbeddedResource | types.ResourceLink]
Output = tuple[Content, msgspec.Struct | None]


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    args: type[msgspec.Struct]
    output: type[msgspec.Struct] | None
    run: Callable[[McpTools, Caller, Any], Awaitable[Output]]
    read_only: bool = False
    destructive: bool = False

    def described(self, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS) -> str:
        """The description a model reads, with the server's bound on a result's text filled in."""
        return self.description.replace("{bound}", f"{max_result_chars:,}")


def _schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """A JSON Schema for `struct` whose top level is the object itself (as MCP wants), helpers in $defs."""
    (ref,), components = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    name = ref["$ref"].rsplit("/", 1)[1]
    schema = dict(components.pop(name))
    if components:
        schema["$defs"] = components
    # as JSON: msgspec gives a tuple default (an empty allowlist) as a tuple, which a client sees as a list
    return ecma_patterns(msgspec.json.decode(msgspec.json.encode(schema)))


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _fields(args: msgspec.Struct, wire: type[msgspec.Struct]) -> dict[str, Any]:
    """The fields of the HTTP body `wire` among the tool arguments `args`."""
    return {name: getattr(args, name) for name in wire.__struct_fields__}


class _TooLarge(Exception):
    pass


class _CappedSink(io.RawIOBase):
    """Collects a download, refusing past `cap` bytes."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, chunk) -> int:
        if len(self.data) + len(chunk) > self.cap:
            raise _TooLarge
        self.data += chunk
        return len(chunk)


class McpTools:
    """The MCP tools, as calls of the HTTP API (wasm_runner.client.AsyncClient).

    Every tool call is an HTTP request to the service, carrying the caller's credentials:
    over MCP-over-HTTP the Authorization header of the MCP request is forwarded as is, so
    the API key, its workspace (session ownership), quotas, rate limit and audit apply
    exactly as to the HTTP API, and failures carry the HTTP API's own code, message and hint.
    """

    def __init__(self, base_url: str | None = None, *, uds: str | None = None, api_key: str = "",
                 profile: str | None = None, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS) -> None:
        self.base_url = base_url
        """The HTTP API (for /mcp: set from the first MCP request's local address)."""
        self.uds = uds
        """A Unix socket to reach it through, instead of TCP."""
        self.api_key = api_key
        """Sent when the caller brings no credentials of its own (stdio); "" sends none."""
        self.profile = profile
        """Profile of the sessions created for connections (None: the service's default)."""
        self.max_result_chars = max_result_chars
        """Text one tool result hands a model at most (the service config's [mcp] section)."""
        self._bound: OrderedDict[str, str] = OrderedDict()
        """Connection -> the id of its session."""
        self._clients: OrderedDict[str, AsyncClient] = OrderedDict()

    # -- HTTP clients, one per credential -----------------------------------------------------------

    def client(self, caller: Caller) -> AsyncClient:
        if self.base_url is None:
            raise ClientApiError(503, ErrorCode.NOT_READY, "the MCP endpoint does not know the HTTP API's address yet",
                                 "retry")
        authorization = caller.authorization if caller.headers is not None else None
        key = authorization or ""
        client = self._clients.get(key)
        if client is None:
            transport = httpx.AsyncHTTPTransport(uds=self.uds) if self.uds else None
            headers = {"Authorization": authorization} if authorization else None
            # api_key="" (never None): a server's own $WASM_RUNNER_API_KEY must not stand in for a caller's
            api_key = "" if caller.headers is not None else self.api_key
            client = AsyncClient(self.base_url, api_key=api_key, headers=headers, transport=transport)
            self._clients[key] = client
            while len(self._clients) > MAX_CLIENTS:
                _, old = self._clients.popitem(last=False)
                asyncio.ensure_future(old.aclose())
        self._clients.move_to_end(key)
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            await client.aclose()

    # -- sessions of connections -----------------------------------------------------------

    def _key(self, caller: Caller) -> str | None:
        if caller.connection is None:
            return None
        credential = caller.authorization or ""
        return caller.connection + ":" + hashlib.sha256(credential.encode()).hexdigest()[:16]

    def bound(self, caller: Caller) -> str | None:
        key = self._key(caller)
        return self._bound.get(key) if key is not None else None

    def _bind(self, caller: Caller, session_id: str | None) -> None:
        key = self._key(caller)
        if key is None:
            return
        if session_id is None:
            self._bound.pop(key, None)
            return
        self._bound[key] = session_id
        self._bound.move_to_end(key)
        while len(self._bound) > MAX_CONNECTIONS:
            self._bound.popitem(last=False)

    async def _connection_session(self, caller: Caller) -> str:
        bound = self.bound(caller)
        if bound is not None:
            return bound
        metadata = {"created_by": "mcp"}
        if caller.connection not in (None, STDIO):
            metadata["mcp_session"] = caller.connection.removeprefix("http:")[:128]
        info = await self.client(caller).create_session(profile=self.profile, metadata=metadata)
        self._bind(caller, info.id)
        return info.id

    async def in_session(self, caller: Caller, name: str | None, op: Callable[[str], Awaitable[T]]) -> T:
        """Run `op(session_id)` in the session named, else the connection's (created on first use, and again
        if it expired or was deleted)."""
        if name is not None:
            return await op(name)
        session_id = await self._connection_session(caller)
        try:
            return await op(session_id)
        except NotFoundError as exc:
            if exc.code != ErrorCode.SESSION_NOT_FOUND:
                raise
            log.info("connection session gone; starting another",
                     extra={"event": "mcp_session_replaced", "session": session_id})
            self._bind(caller, None)
            return await op(await self._connection_session(caller))

    # -- execution ----------------------------------------------------------------------------------

    async def execute_code(self, caller: Caller, args: ExecuteCodeArgs) -> Output:
        body: dict[str, Any] = msgspec.to_builtins(ExecBody(**_fields(args, ExecBody)))
        if args.harness != "script" or args.tests:
            body.update(harness=args.harness, tests=args.tests)  # needs ExecBody.harness/tests on the server

        async def run(session_id: str) -> Output:
            client = self.client(caller)
            # streamed, so that a call of a tool that needs approval is put to the MCP client (approvals.py)
            answer_to = AnswerTo.session(session_id)

            async def decide(event: ToolCallEvent | ApprovalEvent) -> None:
                if not isinstance(event, ApprovalEvent):
                    return  # no caller-side tools over MCP (refused with 422): no tool_call event comes
                decision = (await caller.ask(event) if caller.ask is not None
                            else ApprovalDecision(approve=False, reason=NO_ELICITATION))
                with contextlib.suppress(NotFoundError):  # timed out, or the run ended: refused already
                    await client.call("POST", answer_to.approval(event.approval_id), ApprovalDecided, body=decision)

            call = Call("POST", f"/v1/sessions/{_seg(session_id)}/exec", body=body)
            async with AsyncExecStream(client, call, ExecResult, decide, answer_to) as stream:
                result = await stream.collect()
            return await self._result(client, session_id, result)

        return await self.in_session(caller, args.session, run)

    async def run_process(self, caller: Caller, args: RunProcessArgs) -> Output:
        body = ProcessBody(**_fields(args, ProcessBody))

        async def run(session_id: str) -> Output:
            client = self.client(caller)
            result = await client.call("POST", f"/v1/sessions/{_seg(session_id)}/process", ExecResult, body=body)
            return await self._result(client, session_id, result)

        return await self.in_session(caller, args.session, run)

    async def _result(self, client: AsyncClient, session_id: str, result: ExecResult) -> Output:
        paths = sorted({p for p in (*result.files.created, *result.files.modified) if _image_type(p)})
        images: list[tuple[str, types.ImageContent]] = []
        notes: list[str] = []
        # Figures the code showed (rich outputs) come first, in order; the structured result keeps
        # their place and plain text, not their bytes a second time.
        for index, rich in enumerate(result.outputs):
            if rich.type != "image/png":
                continue
            if len(images) >= MAX_IMAGES:
                notes.append(f"output {index}: image not returned (at most {MAX_IMAGES} images per result)")
                continue
            images.append((f"output:{index}", types.ImageContent(type="image", data=rich.data, mime_type=rich.type)))
        if images:
            result = msgspec.structs.replace(result, outputs=[
                msgspec.structs.replace(o, data="") if o.type == "image/png" else o for o in result.outputs])
        shown = bool(images)
        for path in paths:
            if shown:  # most often the figure shown, saved too: a model gets each image once
                notes.append(f"{path}: an image this call wrote, not sent next to the figure(s) shown "
                             "(read_file it to see it)")
                continue
            if len(images) >= MAX_IMAGES:
                notes.append(f"{path}: not returned (at most {MAX_IMAGES} images per result; read_file it)")
                continue
            try:
                data = await _read(client, session_id, path, MAX_IMAGE_BYTES)
            except _TooLarge:
                link = await client.presign(session_id, path)
                notes.append(f"{path}: not returned inline (over {MAX_IMAGE_BYTES} bytes); download: {link.url}")
                continue
            except ClientApiError:
                continue  # gone or replaced since
            if data:
                images.append((path, types.ImageContent(type="image", data=base64.b64encode(data).decode(),
                                                        mime_type=_image_type(path) or "image/png")))
        result, full, links = await self._fit(client, session_id, result, notes)
        output = ExecOutput(**msgspec.structs.asdict(result), session=session_id, images=[p for p, _ in images],
                            full_output=full)
        content: Content = [_text(describe(result, session_id, notes))]
        content += links
        content += [image for _, image in images]
        return content, output

    async def _fit(self, client: AsyncClient, session_id: str, result: ExecResult,
                   notes: list[str]) -> tuple[ExecResult, dict[str, str], list[types.ResourceLink]]:
        """The result with stdout and stderr cut to their head and tail when its text would pass the bound,
        each cut stream kept in full in the workspace and linked."""
        limit = self.max_result_chars
        if len(describe(result, session_id, notes)) <= limit:
            return result, {}, []
        rest = len(describe(msgspec.structs.replace(result, stdout="", stderr=""), session_id, notes))
        cap = share([len(result.stdout), len(result.stderr)], max(limit - rest - 4 * MARKER_ROOM, 1000))
        cut: dict[str, str] = {}
        full: dict[str, str] = {}
        links: list[types.ResourceLink] = []
        for stream in ("stdout", "stderr"):
            text = getattr(result, stream)
            if len(text) <= cap:
                continue
            path = f"{FULL_OUTPUT_DIR}/{secrets.token_hex(4)}-{stream}.txt"
            where = await self._keep(client, session_id, path, text, links)
            if links and len(links) > len(full):
                full[stream] = str(links[-1].uri)
            cut[stream] = clip(text, cap, where)
        return msgspec.structs.replace(result, **cut), full, links

    async def _keep(self, client: AsyncClient, session_id: str, path: str, text: str,
                    links: list[types.ResourceLink]) -> str:
        """Keep `text` in the workspace file `path`; where to read it, for the marker of the cut."""
        data = text.encode("utf-8")
        try:
            await client.write_file(session_id, path, data, mkdirs=True)
        except ClientApiError as exc:
            return f"the full text could not be kept ({exc.code}: {exc.message})"
        links.append(self._link(session_id, path, len(data)))
        return f"full text: {path} in the workspace (the resource link; grep or read it with code)" + \
            await self._download(client, session_id, path)

    def _link(self, session_id: str, path: str, size: int) -> types.ResourceLink:
        uri = f"wasm-runner://sessions/{_seg(session_id)}/files/{quote(path)}"
        return types.ResourceLink(type="resource_link", uri=uri, name=path, mime_type="text/plain", size=size,
                                  description="the full text; this result holds its head and tail")

    async def _download(self, client: AsyncClient, session_id: str, path: str) -> str:
        """A presigned link to `path`, when the caller reaches the service over HTTP (over stdio's private
        socket a link would lead nowhere: the resource link is the way)."""
        if self.uds is not None:
            return ""
        try:
            link = await client.presign(session_id, path)
        except ClientApiError:
            return ""
        return f"; download (no key, {link.expires_in / 60:.0f} min): {link.url}"

    async def read_resource(self, caller: Caller, uri: str) -> types.ReadResourceResult:
        """A workspace file named by a resource link this server gave (read with the caller's credentials,
        so the HTTP API decides as for any read)."""
        match = RESOURCE_URI.fullmatch(uri)
        session_id = unquote(match[1]) if match else ""
        path = unquote(match[2]) if match else ""
        if (match is None or not re.fullmatch(SESSION_ID_PATTERN, session_id) or path.startswith("/")
                or any(part in ("", ".", "..") for part in path.split("/"))):
            raise MCPError(types.INVALID_PARAMS, f"not a resource of this server: {uri!r}",
                           {"hint": "use a wasm-runner://sessions/<id>/files/<path> link a tool result gave"})
        client = self.client(caller)
        try:
            data = await _read(client, session_id, path, MAX_RESOURCE_BYTES)
        except _TooLarge:
            raise MCPError(types.INVALID_PARAMS, f"{path} is over {MAX_RESOURCE_BYTES} bytes",
                           {"hint": "download it with read_file's link"}) from None
        except ClientApiError as exc:
            code = RESOURCE_NOT_FOUND if exc.status == 404 else types.INVALID_PARAMS
            raise MCPError(code, f"{exc.code}: {exc.message}", {"hint": exc.hint}) from None
        mime = _image_type(path) or mimetypes.guess_type(path)[0] or "text/plain"
        if b"\x00" not in data:
            try:
                return types.ReadResourceResult(
                    contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=data.decode("utf-8"))])
            except UnicodeDecodeError:
                pass
        return types.ReadResourceResult(contents=[types.BlobResourceContents(
            uri=uri, mime_type="application/octet-stream" if mime == "text/plain" else mime,
            blob=base64.b64encode(data).decode())])

    # -- files ------------------------------------------------------------------------------------------

    async def read_file(self, caller: Caller, args: ReadFileArgs) -> Output:
        async def read(session_id: str) -> Output:
            client = self.client(caller)
            try:
                data = await _read(client, session_id, args.path, MAX_INLINE_BYTES)
            except _TooLarge:
                link = await client.presign(session_id, args.path)
                return [_text(f"{args.path} is larger than {MAX_INLINE_BYTES} bytes, so it is not returned inline: "
                              f"download it from {link.url} (no key needed; the link expires in "
                              f"{link.expires_in / 60:.0f} min), or read part of it with code")], None
            except ConflictError as exc:
                if exc.code != ErrorCode.IS_A_DIRECTORY:
                    raise
                listing = await client.list_files(session_id, args.path)
                return [_text(_listing_text(listing.path, listing.entries, listing.truncated))], None
            mime = _image_type(args.path) or mimetypes.guess_type(args.path)[0]
            if mime is not None and mime in IMAGE_TYPES.values():
                return [types.ImageContent(type="image", data=base64.b64encode(data).decode(), mime_type=mime)], None
            if b"\x00" not in data:
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
                else:
                    if len(text) <= self.max_result_chars:
                        return [_text(text)], None
                    where = (f"full text: the resource link, or read parts of {args.path} with code"
                             + await self._download(client, session_id, args.path))
                    return [_text(clip(text, self.max_result_chars, where)),
                            self._link(session_id, args.path, len(data))], None
            uri = f"wasm-runner://sessions/{session_id}/files/{quote(args.path)}"
            blob = types.BlobResourceContents(uri=uri, mime_type=mime or "application/octet-stream",
                                              blob=base64.b64encode(data).decode())
            note = _text(f"{args.path}: {len(data)} bytes of binary data (base64 in the resource)")
            return [note, types.EmbeddedResource(type="resource", resource=blob)], None

        return await self.in_session(caller, args.session, read)

    async def write_file(self, caller: Caller, args: WriteFileArgs) -> Output:
        if args.encoding == "base64":
            try:
                data = base64.b64decode(args.content, validate=True)
            except (binascii.Error, ValueError):
                raise ClientApiError(422, ErrorCode.VALIDATION_ERROR, "content is not valid base64",
                                     "send the bytes base64-encoded, or text with encoding 'utf-8'") from None
        else:
            data = args.content.encode("utf-8")

        async def write(session_id: str) -> Output:
            result = await self.client(caller).write_file(session_id, args.path, data, mkdirs=args.mkdirs)
            verb = "created" if result.created else "replaced"
            return [_text(f"{verb} {result.path} ({result.size} bytes)")], result

        return await self.in_session(caller, args.session, write)

    async def edit_file(self, caller: Caller, args: EditFileArgs) -> Output:
        body = FileEdit(**_fields(args, FileEdit))

        async def edit(session_id: str) -> Output:
            path = f"/v1/sessions/{_seg(session_id)}/files/{file_path(args.path)}"
            result = await self.client(caller).call("PATCH", path, EditResult, body=body)
            what = (f"{result.hunks} hunk(s) applied" if args.patch is not None
                    else f"{result.replacements} replacement(s)")
            return [_text(f"edited {result.path}: {what}; now {result.size} bytes")], result

        return await self.in_session(caller, args.session, edit)

    async def publish_artifact(self, caller: Caller, args: PublishArtifactArgs) -> Output:
        body = ArtifactCreate(**_fields(args, ArtifactCreate))

        async def publish(session_id: str) -> Output:
            client = self.client(caller)
            info = await client.call("POST", f"/v1/sessions/{_seg(session_id)}/artifacts", ArtifactInfo, body=body)
            link = await client.call("POST", f"/v1/artifacts/{_seg(info.id)}:presign", PresignResult,
                                     body=ArtifactPresignBody())
            url = _absolute(client, link.url)
            published = PublishedArtifact(**msgspec.structs.asdict(info), url=url, link_expires_at=link.expires_at)
            return [_text(f"published {info.name} as artifact {info.id} ({info.size} bytes, "
                          f"sha256 {info.sha256[:12]}…); download: {url} (no key needed, for "
                          f"{link.expires_in / 60:.0f} min)")], published

        return await self.in_session(caller, args.session, publish)

    async def list_files(self, caller: Caller, args: ListFilesArgs) -> Output:
        async def listing(session_id: str) -> Output:
            result = await self.client(caller).list_files(session_id, args.path, recursive=args.recursive,
                                                          limit=args.limit)
            return [_text(_listing_text(result.path, result.entries, result.truncated))], result

        return await self.in_session(caller, args.session, listing)

    async def glob(self, caller: Caller, args: GlobArgs) -> Output:
        async def glob(session_id: str) -> Output:
            result = await self.client(caller).glob(session_id, args.pattern, limit=args.limit)
            lines = [m.path + ("/" if m.type == "directory" else "") for m in result.matches]
            text = "\n".join(lines) if lines else f"no paths match {args.pattern!r}"
            if result.truncated:
                text += f"\n(truncated at {args.limit})"
            return [_text(text)], result

        return await self.in_session(caller, args.session, glob)

    async def grep(self, caller: Caller, args: GrepArgs) -> Output:
        async def grep(session_id: str) -> Output:
            result = await self.client(caller).grep(session_id, args.pattern, args.path, glob=args.glob,
                                                    ignore_case=args.ignore_case, fixed_string=args.fixed_string,
                                                    max_matches=args.max_matches)
            lines = [f"{m.path}:{m.line}: {m.text}" for m in result.matches]
            text = "\n".join(lines) if lines else f"no matches in {result.files_searched} file(s)"
            if result.truncated:
                text += "\n(stopped early: " + ("time budget" if result.timed_out else "match or scan cap") + ")"
            return [_text(text)], result

        return await self.in_session(caller, args.session, grep)

    async def tools_api(self, caller: Caller, args: ToolsApiArgs) -> Output:
        async def api(session_id: str) -> Output:
            listed = await self.client(caller).tools(session_id)
            if not listed.tools:
                return [_text("no tools: the session's profile configures no MCP servers")], listed
            text = listed.python if args.language == "python" else listed.typescript
            return [_text(text)], listed

        return await self.in_session(caller, args.session, api)

    async def install_packages(self, caller: Caller, args: InstallPackagesArgs) -> Output:
        async def install(session_id: str) -> Output:
            result = await self.client(caller).install(session_id, args.python)
            if result.ok:
                lines = [f"{p.name}=={p.version} ({p.source})" for p in result.installed]
                text = ("installed: " + ", ".join(lines)) if lines else "already installed"
                text += f"; {result.duration_ms:.0f} ms; import them in code of this session"
            else:
                error = result.error
                text = f"not installed ({error.kind}): {error.message}" if error else "not installed"
                if error is not None and error.hint:
                    text += f"\nhint: {error.hint}"
            return [_text(text)], result

        return await self.in_session(caller, args.session, install)

    # -- background processes -------------------------------------------------------------------------

    async def start_process(self, caller: Caller, args: StartProcessArgs) -> Output:
        body = ProcessStart(**_fields(args, ProcessStart))

        async def start(session_id: str) -> Output:
            info = await self.client(caller).call("POST", f"/v1/sessions/{_seg(session_id)}/processes", ProcessInfo,
                                                 body=body)
            text = (f"started {describe_process(info, session_id)}. Read its output with "
                    f"process_output(process={info.id!r}); stop it with stop_process.")
            return [_text(text)], info

        return await self.in_session(caller, args.session, start)

    async def process_output(self, caller: Caller, args: ProcessOutputArgs) -> Output:
        async def read(session_id: str) -> Output:
            output = await self.client(caller).process_output(
                session_id, args.process, stream=args.stream, offset=args.offset, limit=args.limit,
                encoding=args.encoding, wait_s=args.wait_s)
            return [_text(describe_output(output, args.process))], output

        return await self.in_session(caller, args.session, read)

    async def send_input(self, caller: Caller, args: SendInputArgs) -> Output:
        body = ProcessStdin(**_fields(args, ProcessStdin))

        async def send(session_id: str) -> Output:
            path = f"/v1/sessions/{_seg(session_id)}/processes/{_seg(args.process)}/stdin"
            result = await self.client(caller).call("POST", path, ProcessStdinResult, body=body)
            text = f"wrote {result.written} bytes to {args.process}'s stdin" + (", then closed it" if args.eof else "")
            return [_text(text)], result

        return await self.in_session(caller, args.session, send)

    async def stop_process(self, caller: Caller, args: StopProcessArgs) -> Output:
        async def stop(session_id: str) -> Output:
            info = await self.client(caller).stop_process(session_id, args.process)
            return [_text(describe_process(info, session_id))], info

        return await self.in_session(caller, args.session, stop)

    async def preview_url(self, caller: Caller, args: PreviewUrlArgs) -> Output:
        async def link(session_id: str) -> Output:
            client = self.client(caller)
            path = f"/v1/sessions/{_seg(session_id)}/ports/{args.port}:presign"
            preview = await client.call("POST", path, PreviewLink, body=PreviewLinkBody(expires_in=args.expires_in))
            preview.url = _absolute(client, preview.url)
            return [_text(describe_link(preview))], preview

        return await self.in_session(caller, args.session, link)

    # -- sessions -----------------------------------------------------------------------------------------

    async def session_new(self, caller: Caller, args: SessionNewArgs) -> Output:
        fields = _fields(args, SessionCreate)
        if not fields["metadata"]:
            fields["metadata"] = {"created_by": "mcp"}
        info = await self.client(caller).call("POST", "/v1/sessions", SessionInfo,
                                             body=SessionCreate(**fields))
        if args.switch and caller.connection is not None:
            self._bind(caller, info.id)
            note = "this connection now uses it"
        else:
            note = f"pass session={info.id!r} to use it"
        return [_text(f"created session {info.id} (profile {info.profile}); {note}")], info

    async def session_list(self, caller: Caller, args: SessionListArgs) -> Output:
        result = await self.client(caller).list_sessions(cursor=args.cursor, limit=args.limit)
        mine = self.bound(caller)
        lines = [f"{s.id}  profile={s.profile}  state={s.state}  executions={s.executions}"
                 + ("  (this connection)" if s.id == mine else "") for s in result.sessions]
        text = "\n".join(lines) if lines else "no sessions"
        if result.next_cursor is not None:
            text += f"\n(more: cursor={result.next_cursor!r})"
        return [_text(text)], result

    async def session_fork(self, caller: Caller, args: SessionForkArgs) -> Output:
        async def fork(session_id: str) -> Output:
            result = await self.client(caller).fork(session_id, args.count)
            lines = [f"forked {session_id} into {len(result.sessions)} session(s): "
                     + ", ".join(s.id for s in result.sessions) + "; each keeps the variables and files it had "
                     "and goes its own way (pass session=<id> to use one)"]
            lines += [f"note: a new {lang} kernel starts in each copy: {why}" for lang, why in result.fresh_kernels.items()]
            lines += [f"copy {f.index} failed: {f.error}" for f in result.failed]
            return [_text("\n".join(lines))], result

        return await self.in_session(caller, args.session, fork)

    async def session_reset(self, caller: Caller, args: SessionResetArgs) -> Output:
        async def reset(session_id: str) -> Output:
            client = self.client(caller)
            old = await client.get_session(session_id)
            await client.delete_session(session_id)
            info = await client.create_session(session_id, profile=old.profile, idle_timeout_s=old.idle_timeout_s,
                                               ttl_s=old.ttl_s, metadata=old.metadata)
            return [_text(f"reset session {info.id}: files and kernels are gone")], info

        return await self.in_session(caller, args.session, reset)


async def _read(client: AsyncClient, session_id: str, path: str, cap: int) -> bytes:
    sink = _CappedSink(cap)
    await client.download(session_id, path, cast(IO[bytes], sink))
    return bytes(sink.data)


def _absolute(client: AsyncClient, path: str) -> str:
    """A link's path on the server as the client reaches it (over HTTP), else as is."""
    if path.startswith(("http://", "https://")):  # already absolute: a preview's own origin
        return path
    base = client.base_url
    return base.rstrip("/") + path if base.startswith(("http://", "https://")) else path


def _seg(value: str) -> str:
    return quote(value, safe="")


def _image_type(path: str) -> str | None:
    dot = path.rfind(".")
    return IMAGE_TYPES.get(path[dot:].lower()) if dot != -1 else None


def _listing_text(path: str, entries: list, truncated: bool) -> str:
    if not entries:
        return f"{path or 'the workspace'} is empty"
    lines = [e.path + ("/" if e.type == "directory" else f"  {e.size} bytes") for e in entries]
    if truncated:
        lines.append("(truncated)")
    return "\n".join(lines)


def describe(result: ExecResult, session_id: str, notes: Sequence[str] = ()) -> str:
    """An execution result as text for a model to read."""
    parts: list[str] = []
    if result.stdout:
        parts.append("stdout:\n" + result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("stderr:\n" + result.stderr.rstrip("\n"))
    if result.value is not None:
        parts.append(f"value: {result.value}")
    for index, rich in enumerate(result.outputs):
        if rich.type == "text/html":  # a model reads the plain rendering of a table better than its markup
            parts.append(f"output {index} (text/html; plain text):\n" + (rich.plain or rich.data))
        elif rich.type == "image/png":
            parts.append(f"output {index}: an image (image content)")
    if result.error is not None:
        error = result.error
        line = f"error: {error.type}: {error.message}"
        if error.line is not None:
            line += f" (line {error.line}" + (f": {error.source.strip()}" if error.source else "") + ")"
        parts.append(line)
        if error.traceback and error.traceback.strip() not in result.stderr:
            parts.append(error.traceback.rstrip("\n"))
        if error.hint:  # what to do: the host's words, which a model reads in the text
            parts.append(f"hint: {error.hint}")
    if result.limit is not None:
        parts.append(f"limit: {result.limit}: {LIMIT_MESSAGES.get(result.limit, 'stopped')}")
    if result.truncated:
        parts.append("output truncated: " + ", ".join(result.truncated))
    if result.verdict is not None:
        parts.append(f"verdict: {result.verdict}")
    changes = result.files
    for label, paths in (("created", changes.created), ("modified", changes.modified), ("deleted", changes.deleted)):
        if paths:
            parts.append(f"files {label}: " + ", ".join(paths))
    parts.extend(notes)
    if not parts:
        parts.append("(no output)")
    status = f"exit code {result.exit_code}, {result.duration_ms:.0f} ms, session {session_id}"
    if result.queued_ms is not None:
        status += f"; waited {result.queued_ms:.0f} ms for its turn (the service was busy)"
    if result.kernel_restarted:
        status += "; the kernel was restarted: earlier variables are gone (files are kept)"
        if result.restart_reason:
            status += f" ({result.restart_reason})"
    if result.kernel_rolled_back:
        status += "; the kernel was rolled back to before this call: earlier variables are kept (files it wrote stay)"
    parts.append(status)
    return "\n".join(parts)


TOOLS: tuple[Tool, ...] = (
    Tool("sandbox_execute_code", "Execute code",
         "Run code in the session's sandbox, with the network only as the session's "
         "profile allows, none by default: urllib/http.client and fetch go through the host, which checks "
         "each request; `egress` narrows it for this call). Variables persist "
         "between calls (a kernel; the last expression's value is returned); files persist in the workspace, "
         "which is the current directory. Returns stdout, stderr, errors with their line, limits hit, and "
         "images the code wrote (PNG, JPEG, SVG) and figures it showed as image content. `fresh` runs in a new "
         "instance instead of the kernel; harness 'check' runs `code`, then `tests` against it, and gives a verdict; `path` runs "
         "a workspace file instead of `code`. " + TIERS + " " + LIMITS,
         ExecuteCodeArgs, ExecOutput, McpTools.execute_code),
    Tool("run_process", "Run a program",
         "Run a program natively in the session's workspace, sandboxed by bubblewrap, with the network only "
         "as the session's profile allows (none by default; curl, pip and git go through the host's proxy): e.g. "
         "['python3', 'plot.py'], ['sh', '-c', 'ls -la | head'], ['pandoc', 'in.md', '-o', 'out.pdf']. "
         "Use it for command-line tools (pandoc, git, sed, ffmpeg where installed); for pandas/numpy/matplotlib "
         "prefer sandbox_execute_code with profile 'python-data' (a kernel keeps variables). Needs the server's "
         "native provider. Returns output and images written, like sandbox_execute_code. " + LIMITS,
         RunProcessArgs, ExecOutput, McpTools.run_process),
    Tool("start_process", "Start a background process",
         "Start a program that keeps running after this call (a dev server, a watcher, a long job, an "
         "interactive program), natively in the session's sandbox and workspace, confined like run_process: "
         "`command` (e.g. ['python3', '-m', 'http.server', '8000']) or `code` with `language`. Answers its id "
         "at once; its output is kept by the server (the oldest bytes dropped past `output_bytes`) and read with "
         "process_output. It ends with the session, or with stop_process.",
         StartProcessArgs, ProcessInfo, McpTools.start_process),
    Tool("process_output", "Read process output",
         "Read a background process's stdout (or stderr) from a byte offset; the answer ends with the next "
         "offset to read from, so nothing is read twice or missed. `wait_s` waits for new output when there "
         "is none yet. Also says whether the process still runs and its exit code.",
         ProcessOutputArgs, ProcessOutput, McpTools.process_output, read_only=True),
    Tool("send_input", "Send input to a process",
         "Write text to a background process's stdin (a line needs its '\\n'); `eof` closes stdin afterwards.",
         SendInputArgs, ProcessStdinResult, McpTools.send_input),
    Tool("stop_process", "Stop a process",
         "Stop a background process and every process it started (TERM, then KILL after a grace period).",
         StopProcessArgs, ProcessInfo, McpTools.stop_process, destructive=True),
    Tool("preview_url", "Preview link",
         "A link to the server a background process listens with on `port` in the sandbox, for the user to "
         "open in a browser (no key needed) until it expires. Start the server with start_process first: "
         "nothing is started for the link.",
         PreviewUrlArgs, PreviewLink, McpTools.preview_url, read_only=True),
    Tool("read_file", "Read a file",
         "Read a workspace file: text comes back as text, images (PNG, JPEG, SVG, GIF, WebP) as image "
         "content, other bytes as a base64 resource; a file over 1 MiB comes back as a download link instead. "
         "A directory answers its listing.",
         ReadFileArgs, None, McpTools.read_file, read_only=True),
    Tool("write_file", "Write a file",
         "Create or replace a workspace file with text (or bytes in base64, with encoding 'base64'). "
         "Missing parent directories are created unless mkdirs is false. The write is atomic.",
         WriteFileArgs, WriteResult, McpTools.write_file, destructive=True),
    Tool("edit_file", "Edit a file",
         "Edit a text file: exact search-and-replace (old_text must occur exactly once unless replace_all), "
         "several replacements at once in `edits` (all or none), or a unified diff in `patch`.",
         EditFileArgs, EditResult, McpTools.edit_file, destructive=True),
    Tool("publish_artifact", "Publish an artifact",
         "Publish a workspace file (or a folder, as a zip or tar.gz archive) as an immutable artifact: copied to "
         "durable storage that outlives the session, with a note; answers its id, sha256 and a download link "
         "that needs no key. Working files are private until published.",
         PublishArtifactArgs, PublishedArtifact, McpTools.publish_artifact),
    Tool("list_files", "List files",
         "List a workspace directory (the root by default), with sizes; recursive lists everything below.",
         ListFilesArgs, FileListing, McpTools.list_files, read_only=True),
    Tool("glob", "Find files",
         "Find workspace paths matching a glob pattern: * and ? stay within one directory, ** spans any "
         "depth; [abc] and {a,b} work too (e.g. '**/*.py', 'out/*.{png,svg}').",
         GlobArgs, GlobResult, McpTools.glob, read_only=True),
    Tool("grep", "Search file contents",
         "Search workspace files for a regular expression (Python syntax; fixed_string for literal text), "
         "answering path:line: text for each match. `glob` limits the files searched.",
         GrepArgs, GrepResult, McpTools.grep, read_only=True),
    Tool("sandbox_tools_api", "Tools for code",
         "The tools code run with sandbox_execute_code may call in this session (code mode): its profile's MCP "
         "servers' tools, as a Python module (`from sandbox import tools`, then `tools.<name>(...)`) or a "
         "TypeScript declaration (`await tools.<name>({...})`). One program can call many tools, loop and "
         "filter, and return only the answer; each call is decided and recorded by the host.",
         ToolsApiArgs, ToolList, McpTools.tools_api, read_only=True),
    Tool("install_packages", "Install packages",
         "Install pure-Python packages (wheels from the server's package index) into the session, so that "
         "code run in it later can import them, in the kernel and in fresh runs, also after a restart. The "
         "host resolves and downloads them from the server's indexes, within the session's network policy "
         "(the sandbox never connects to the index itself); packages with native code "
         "are refused with a hint to use the native provider (run_process).",
         InstallPackagesArgs, InstallResult, McpTools.install_packages),
    Tool("session_new", "New session",
         "Start a new session (an empty workspace, no kernels) and, unless switch is false, make it this "
         "connection's session.",
         SessionNewArgs, SessionInfo, McpTools.session_new),
    Tool("session_list", "List sessions",
         "List sessions with their profile and state; the one this connection uses is marked.",
         SessionListArgs, SessionList, McpTools.session_list, read_only=True),
    Tool("session_fork", "Fork session",
         "Copy a session (this connection's by default) into `count` new sessions, each with its files, "
         "installed packages and variables as they are now, to try different approaches from one point; the "
         "copies share nothing writable with it or each other. This connection keeps its session.",
         SessionForkArgs, SessionForkResult, McpTools.session_fork),
    Tool("session_reset", "Reset session",
         "Reset a session (this connection's by default): it starts again under the same id and profile, "
         "with no files and no variables.",
         SessionResetArgs, SessionInfo, McpTools.session_reset, destructive=True),
)


# -- the MCP server ---------------------------------------------------------------------------------------


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    request = ctx.request
    headers = getattr(request, "headers", None) if request is not None else None
    if headers is None:
        return Caller(STDIO, ask=asker(ctx.session, ctx.request_id))  # stdio: the process serves one connection
    session = headers.get("mcp-session-id")
    return Caller(f"http:{session}" if session else None, headers, asker(ctx.session, ctx.request_id))


def tool_error(code: str, message: str, hint: str | None = None) -> types.CallToolResult:
    """An MCP tool error carrying what the HTTP API answers for the same failure (its error body)."""
    text = f"{code}: {message}"
    if hint:
        text += f"\nhint: {hint}"
    body = {"error": {"code": code, "message": message, "hint": hint}}
    return types.CallToolResult(content=[_text(text)], structured_content=body, is_error=True)


def build_server(tools: McpTools, *, version: str = "") -> Server[Any]:
    """The MCP server (low-level SDK server, schemas from msgspec) over `tools`."""
    by_name = {tool.name: tool for tool in TOOLS}
    schemas = {tool.name: _schema(tool.args) for tool in TOOLS}
    listed = [
        types.Tool(
            name=tool.name, title=tool.title, description=tool.described(tools.max_result_chars),
            input_schema=schemas[tool.name],
            output_schema=_schema(tool.output) if tool.output is not None else None,
            annotations=types.ToolAnnotations(title=tool.title, read_only_hint=tool.read_only,
                                              destructive_hint=tool.destructive if not tool.read_only else None,
                                              open_world_hint=False),
        )
        for tool in TOOLS
    ]
    decoders = {tool.name: tool.args for tool in TOOLS}

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            return tool_error(ErrorCode.UNKNOWN_TOOL, f"no tool named {params.name!r}", f"available: {', '.join(by_name)}")
        try:
            args = msgspec.convert(params.arguments or {}, decoders[tool.name], strict=False)
            content, structured = await tool.run(tools, _caller(ctx), args)
        except ClientApiError as exc:
            return tool_error(exc.code, exc.message, exc.hint)
        except TransportError as exc:
            return tool_error(ErrorCode.UNAVAILABLE, f"the HTTP API could not be reached: {exc}", "retry shortly")
        except msgspec.ValidationError as exc:
            error = from_validation(exc)
            return tool_error(error.code, error.message, error.hint)
        except Exception:
            log.exception("MCP tool failed", extra={"event": "mcp_tool_failed", "tool": tool.name})
            return tool_error(ErrorCode.INTERNAL_ERROR, "the server failed to handle this request",
                              "retry; if it persists, report it with the time of the request")
        # The last word on size, for every tool: no result hands a model more than the bound.
        limit = tools.max_result_chars
        return types.CallToolResult(
            content=bound_content(content, limit),
            structured_content=bound_structured(msgspec.to_builtins(structured), limit)
            if structured is not None else None)

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        try:
            return await tools.read_resource(_caller(ctx), str(params.uri))
        except TransportError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"the HTTP API could not be reached: {exc}") from None

    return Server(SERVER_NAME, version=version, title="wasm-runner",
                  instructions=INSTRUCTIONS.replace("{bound}", f"{tools.max_result_chars:,}"),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_read_resource=read_resource,
                  get_tool_input_schema=lambda name: schemas.get(name))


# -- streamable HTTP on the aiohttp service -----------------------------------------------------------------


class _HttpTransport:
    """The SDK's streamable-HTTP session manager, run for the life of the application."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.background: set[asyncio.Task] = set()
        """Requests answered whose handling is winding down (see serve_asgi)."""

    async def start(self) -> None:
        started = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        self._task = asyncio.create_task(run(), name="wasm-runner-mcp")
        waiter = asyncio.ensure_future(started.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            self._task.result()  # raises what stopped it

    async def stop(self) -> None:
        """End every MCP session (their open streams close), then the manager."""
        for task in list(self.background):
            task.cancel()
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 10)
            except (TimeoutError, asyncio.CancelledError):
                log.warning("the MCP transport did not stop within 10 s", extra={"event": "mcp_stop_timeout"})
            except Exception:
                log.exception("the MCP transport failed", extra={"event": "mcp_failed"})
            self._task = None


MCP_HTTP = web.AppKey("mcp_http", _HttpTransport)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def mount_mcp(app: web.Application, path: str = MCP_PATH) -> None:
    """Serve MCP over streamable HTTP at `path` on the service `app`.

    The route goes through the app's middlewares like any other (so /mcp needs the same API
    keys), and each tool call is a request to this same service's HTTP API carrying the MCP
    request's Authorization header, so keys, workspaces, quotas and audit apply unchanged.
    On a loopback address, Host and Origin are checked against DNS rebinding (as the SDK does).
    """
    tools = McpTools(max_result_chars=app[CONFIG].mcp.max_result_chars)
    server = build_server(tools)

    async def start(app: web.Application) -> None:
        settings = app[CONFIG].server
        security = None
        if settings.host in _LOOPBACK:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
        manager = StreamableHTTPSessionManager(server, security_settings=security,
                                               max_request_body_size=settings.max_body_bytes)
        transport = _HttpTransport(manager)
        await transport.start()
        app[MCP_HTTP] = transport

    async def stop(app: web.Application) -> None:
        transport = app.get(MCP_HTTP)
        if transport is not None:
            await transport.stop()
        await tools.aclose()

    async def handle(request: web.Request) -> web.StreamResponse:
        transport = request.app.get(MCP_HTTP)
        if transport is None:
            raise ApiError(503, ErrorCode.NOT_READY, "the MCP endpoint is not running", "retry shortly")
        if tools.base_url is None:
            tools.base_url, tools.uds = _own_address(request)
        user = _mcp_user(request)

        async def as_caller(scope: dict, receive: Callable[[], Awaitable[dict]],
                            send: Send) -> None:
            scope["user"] = user
            await transport.manager.handle_request(scope, receive, send)

        return await serve_asgi(request, as_caller, transport.background)

    app.on_startup.append(start)
    app.on_shutdown.append(stop)
    app.on_cleanup.append(stop)
    app.router.add_route("*", path, handle)


def _mcp_user(request: web.Request) -> AuthenticatedUser:
    """The caller's key as the SDK's authenticated user: the SDK binds an MCP session to the user that
    opened it and answers any other exactly as an unknown session (404), so a session id is no credential."""
    principal = request.get(PRINCIPAL) or LOCAL
    return AuthenticatedUser(AccessToken(token="", client_id=f"{principal.workspace}/{principal.key_id}", scopes=[]))


def _own_address(request: web.Request) -> tuple[str, str | None]:
    """How this server is reached from itself: the local address the request came in on."""
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if isinstance(sock, str) and sock:
        return "http://wasm-runner", sock  # a Unix socket
    if isinstance(sock, tuple):
        host, port = sock[0], sock[1]
        return (f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"), None
    raise ApiError(500, ErrorCode.INTERNAL_ERROR, "the MCP endpoint cannot tell its own address")


def _client_gone(exc: BaseException) -> bool:
    """The connection closed under a write (the client left, or the server is closing connections)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(e) for e in exc.exceptions)
    return isinstance(exc, (ConnectionResetError, BrokenPipeError))


def _settled(task: asyncio.Task) -> None:
    if task.cancelled():
        return
    failure = task.exception()
    if failure is not None and not _client_gone(failure):
        log.error("MCP request failed after its answer", exc_info=failure, extra={"event": "mcp_request_failed"})


Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
AsgiApp = Callable[[dict, Callable[[], Awaitable[dict]], Send], Awaitable[None]]


async def serve_asgi(request: web.Request, app: AsgiApp, background: set[asyncio.Task]) -> web.StreamResponse:
    """Answer an aiohttp request with an ASGI application (HTTP scope; streamed both ways).

    Work the app still does after its response is complete goes on in a task kept in `background`.
    """
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method, "scheme": request.scheme, "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"), "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": {},
    }
    response: web.StreamResponse | None = None
    finished = asyncio.Event()
    body_read = False

    async def receive() -> dict:
        nonlocal body_read
        if not body_read:
            chunk = await request.content.read(256 * 1024)
            body_read = request.content.at_eof()
            return {"type": "http.request", "body": chunk, "more_body": not body_read}
        while not finished.is_set():  # nothing more to read: wait for the end of the exchange
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), 1.0)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            headers = CIMultiDict((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", ()))
            response = web.StreamResponse(status=message["status"], headers=headers)
        elif message["type"] == "http.response.body":
            if response is None:
                raise RuntimeError("ASGI body before response start")
            if not response.prepared:
                await response.prepare(request)
            body = message.get("body", b"")
            if body:
                await response.write(body)
            if not message.get("more_body", False):
                await response.write_eof()
                finished.set()

    # The app runs as its own task: once the response is complete, the rest of its work
    # (closing streams, committing a new MCP session) must not be cancelled with the
    # handler when the client closes the connection, as aiohttp does on disconnect.
    task = asyncio.ensure_future(app(scope, receive, send))
    task.add_done_callback(lambda _: finished.set())
    complete = asyncio.ensure_future(finished.wait())
    try:
        await asyncio.wait({task, complete}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        if not task.done() and (response is None or not response.prepared or not finished.is_set()):
            task.cancel()  # the client left before its answer was complete
        raise
    finally:
        complete.cancel()
    if task.done():
        failure = None if task.cancelled() else task.exception()
        if failure is not None and not (_client_gone(failure) and response is not None and response.prepared):
            raise failure  # the app's own failure (a client that left mid-answer is not one)
    else:
        background.add(task)
        task.add_done_callback(_settled)
        task.add_done_callback(background.discard)
    if response is None:
        raise ApiError(500, ErrorCode.INTERNAL_ERROR, "the MCP endpoint gave no answer")
    if not response.prepared:
        await response.prepare(request)
        await response.write_eof()
    return response
