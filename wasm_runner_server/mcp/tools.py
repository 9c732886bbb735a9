"""The MCP tools' implementation, `McpTools`: each tool a call of the HTTP API through
wasm_runner_client.AsyncClient, in the session its connection is bound to (see server.py)."""

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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar, cast
from urllib.parse import quote, unquote

import httpx
import mcp_types as types
import msgspec
from mcp.shared.exceptions import MCPError

from wasm_runner import ExecResult
from wasm_runner_client import AsyncClient, AsyncExecStream
from wasm_runner_client.calls import AnswerTo, Call, file_path
from wasm_runner_client.errors import ApiError as ClientApiError
from wasm_runner_client.errors import ConflictError, NotFoundError
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.guest import SESSION_ID_PATTERN
from wasm_runner_protocol.processes import (
    PreviewLink,
    PreviewLinkBody,
    ProcessInfo,
    ProcessStart,
    ProcessStdin,
    ProcessStdinResult,
)
from wasm_runner_protocol.tools import ApprovalDecided, ApprovalDecision, ApprovalEvent, ToolCallEvent
from wasm_runner_protocol.wire import (
    ArtifactCreate,
    ArtifactInfo,
    ArtifactPresignBody,
    EditResult,
    ExecBody,
    FileEdit,
    PresignResult,
    ProcessBody,
    SessionCreate,
    SessionInfo,
    ecma_patterns,
)
from wasm_runner_server.mcp.approvals import NO_ELICITATION, Ask
from wasm_runner_server.mcp.arguments import (
    EditFileArgs,
    ExecOutput,
    ExecuteCodeArgs,
    GlobArgs,
    GrepArgs,
    InstallPackagesArgs,
    ListFilesArgs,
    PublishArtifactArgs,
    PublishedArtifact,
    ReadFileArgs,
    RunProcessArgs,
    SessionForkArgs,
    SessionListArgs,
    SessionNewArgs,
    SessionResetArgs,
    ToolsApiArgs,
    WriteFileArgs,
)
from wasm_runner_server.mcp.describe import describe
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
from wasm_runner_server.mcp.rendering import MARKER_ROOM, clip, share
from wasm_runner_server.mcp.settings import DEFAULT_MAX_RESULT_CHARS

T = TypeVar("T")
log = logging.getLogger("wasm_runner.server.mcp")

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


def input_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """A JSON Schema for `struct` whose top level is the object itself (as MCP wants), helpers in $defs."""
    (ref,), components = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    name = ref["$ref"].rsplit("/", 1)[1]
    schema = dict(components.pop(name))
    if components:
        schema["$defs"] = components
    # as JSON: msgspec gives a tuple default (an empty allowlist) as a tuple, which a client sees as a list
    return ecma_patterns(msgspec.json.decode(msgspec.json.encode(schema)))


def text_content(text: str) -> types.TextContent:
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
        content: Content = [text_content(describe(result, session_id, notes))]
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
                return [text_content(f"{args.path} is larger than {MAX_INLINE_BYTES} bytes, so it is not returned inline: "
                              f"download it from {link.url} (no key needed; the link expires in "
                              f"{link.expires_in / 60:.0f} min), or read part of it with code")], None
            except ConflictError as exc:
                if exc.code != ErrorCode.IS_A_DIRECTORY:
                    raise
                listing = await client.list_files(session_id, args.path)
                return [text_content(_listing_text(listing.path, listing.entries, listing.truncated))], None
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
                        return [text_content(text)], None
                    where = (f"full text: the resource link, or read parts of {args.path} with code"
                             + await self._download(client, session_id, args.path))
                    return [text_content(clip(text, self.max_result_chars, where)),
                            self._link(session_id, args.path, len(data))], None
            uri = f"wasm-runner://sessions/{session_id}/files/{quote(args.path)}"
            blob = types.BlobResourceContents(uri=uri, mime_type=mime or "application/octet-stream",
                                              blob=base64.b64encode(data).decode())
            note = text_content(f"{args.path}: {len(data)} bytes of binary data (base64 in the resource)")
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
            return [text_content(f"{verb} {result.path} ({result.size} bytes)")], result

        return await self.in_session(caller, args.session, write)

    async def edit_file(self, caller: Caller, args: EditFileArgs) -> Output:
        body = FileEdit(**_fields(args, FileEdit))

        async def edit(session_id: str) -> Output:
            path = f"/v1/sessions/{_seg(session_id)}/files/{file_path(args.path)}"
            result = await self.client(caller).call("PATCH", path, EditResult, body=body)
            what = (f"{result.hunks} hunk(s) applied" if args.patch is not None
                    else f"{result.replacements} replacement(s)")
            return [text_content(f"edited {result.path}: {what}; now {result.size} bytes")], result

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
            return [text_content(f"published {info.name} as artifact {info.id} ({info.size} bytes, "
                          f"sha256 {info.sha256[:12]}…); download: {url} (no key needed, for "
                          f"{link.expires_in / 60:.0f} min)")], published

        return await self.in_session(caller, args.session, publish)

    async def list_files(self, caller: Caller, args: ListFilesArgs) -> Output:
        async def listing(session_id: str) -> Output:
            result = await self.client(caller).list_files(session_id, args.path, recursive=args.recursive,
                                                          limit=args.limit)
            return [text_content(_listing_text(result.path, result.entries, result.truncated))], result

        return await self.in_session(caller, args.session, listing)

    async def glob(self, caller: Caller, args: GlobArgs) -> Output:
        async def glob(session_id: str) -> Output:
            result = await self.client(caller).glob(session_id, args.pattern, limit=args.limit)
            lines = [m.path + ("/" if m.type == "directory" else "") for m in result.matches]
            text = "\n".join(lines) if lines else f"no paths match {args.pattern!r}"
            if result.truncated:
                text += f"\n(truncated at {args.limit})"
            return [text_content(text)], result

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
            return [text_content(text)], result

        return await self.in_session(caller, args.session, grep)

    async def tools_api(self, caller: Caller, args: ToolsApiArgs) -> Output:
        async def api(session_id: str) -> Output:
            listed = await self.client(caller).tools(session_id)
            if not listed.tools:
                return [text_content("no tools: the session's profile configures no MCP servers")], listed
            text = listed.python if args.language == "python" else listed.typescript
            return [text_content(text)], listed

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
            return [text_content(text)], result

        return await self.in_session(caller, args.session, install)

    # -- background processes -------------------------------------------------------------------------

    async def start_process(self, caller: Caller, args: StartProcessArgs) -> Output:
        body = ProcessStart(**_fields(args, ProcessStart))

        async def start(session_id: str) -> Output:
            info = await self.client(caller).call("POST", f"/v1/sessions/{_seg(session_id)}/processes", ProcessInfo,
                                                 body=body)
            text = (f"started {describe_process(info, session_id)}. Read its output with "
                    f"process_output(process={info.id!r}); stop it with stop_process.")
            return [text_content(text)], info

        return await self.in_session(caller, args.session, start)

    async def process_output(self, caller: Caller, args: ProcessOutputArgs) -> Output:
        async def read(session_id: str) -> Output:
            output = await self.client(caller).process_output(
                session_id, args.process, stream=args.stream, offset=args.offset, limit=args.limit,
                encoding=args.encoding, wait_s=args.wait_s)
            return [text_content(describe_output(output, args.process))], output

        return await self.in_session(caller, args.session, read)

    async def send_input(self, caller: Caller, args: SendInputArgs) -> Output:
        body = ProcessStdin(**_fields(args, ProcessStdin))

        async def send(session_id: str) -> Output:
            path = f"/v1/sessions/{_seg(session_id)}/processes/{_seg(args.process)}/stdin"
            result = await self.client(caller).call("POST", path, ProcessStdinResult, body=body)
            text = f"wrote {result.written} bytes to {args.process}'s stdin" + (", then closed it" if args.eof else "")
            return [text_content(text)], result

        return await self.in_session(caller, args.session, send)

    async def stop_process(self, caller: Caller, args: StopProcessArgs) -> Output:
        async def stop(session_id: str) -> Output:
            info = await self.client(caller).stop_process(session_id, args.process)
            return [text_content(describe_process(info, session_id))], info

        return await self.in_session(caller, args.session, stop)

    async def preview_url(self, caller: Caller, args: PreviewUrlArgs) -> Output:
        async def link(session_id: str) -> Output:
            client = self.client(caller)
            path = f"/v1/sessions/{_seg(session_id)}/ports/{args.port}:presign"
            preview = await client.call("POST", path, PreviewLink, body=PreviewLinkBody(expires_in=args.expires_in))
            preview.url = _absolute(client, preview.url)
            return [text_content(describe_link(preview))], preview

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
        return [text_content(f"created session {info.id} (profile {info.profile}); {note}")], info

    async def session_list(self, caller: Caller, args: SessionListArgs) -> Output:
        result = await self.client(caller).list_sessions(cursor=args.cursor, limit=args.limit)
        mine = self.bound(caller)
        lines = [f"{s.id}  profile={s.profile}  state={s.state}  executions={s.executions}"
                 + ("  (this connection)" if s.id == mine else "") for s in result.sessions]
        text = "\n".join(lines) if lines else "no sessions"
        if result.next_cursor is not None:
            text += f"\n(more: cursor={result.next_cursor!r})"
        return [text_content(text)], result

    async def session_fork(self, caller: Caller, args: SessionForkArgs) -> Output:
        async def fork(session_id: str) -> Output:
            result = await self.client(caller).fork(session_id, args.count)
            lines = [f"forked {session_id} into {len(result.sessions)} session(s): "
                     + ", ".join(s.id for s in result.sessions) + "; each keeps the variables and files it had "
                     "and goes its own way (pass session=<id> to use one)"]
            lines += [f"note: a new {lang} kernel starts in each copy: {why}" for lang, why in result.fresh_kernels.items()]
            lines += [f"copy {f.index} failed: {f.error}" for f in result.failed]
            return [text_content("\n".join(lines))], result

        return await self.in_session(caller, args.session, fork)

    async def session_reset(self, caller: Caller, args: SessionResetArgs) -> Output:
        async def reset(session_id: str) -> Output:
            client = self.client(caller)
            old = await client.get_session(session_id)
            await client.delete_session(session_id)
            info = await client.create_session(session_id, profile=old.profile, idle_timeout_s=old.idle_timeout_s,
                                               ttl_s=old.ttl_s, metadata=old.metadata)
            return [text_content(f"reset session {info.id}: files and kernels are gone")], info

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
