"""`AsyncClient`: the HTTP API from async code (asyncio or trio, through httpx and anyio).

The same calls as `Client`, awaited; see sync_client.py for each call's documentation.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import date
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Generic, Literal

import anyio
import httpx
from msgspec import UNSET, UnsetType

from wasm_runner_client import calls
from wasm_runner_client.calls import (
    CHUNK,
    Call,
    LimitsArg,
    OutputEvents,
    R,
    Retry,
    StreamState,
    Upload,
    decode,
    process_path,
    query,
    segment,
    session_path,
)
from wasm_runner_client.errors import NotFoundError, TransportError, error_for
from wasm_runner_client.sync_client import DEFAULT_TIMEOUT, client_headers, usage_query
from wasm_runner_client.wire import (
    CancelResult,
    ConsoleLink,
    DeleteResult,
    EditResult,
    FileListing,
    GlobResult,
    GrepResult,
    Health,
    OneShotResult,
    OutputChunk,
    PresignBody,
    PresignResult,
    PreviewLink,
    PreviewLinkBody,
    ProcessExit,
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    ProcessSignal,
    ProcessStdinResult,
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
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.execution import ExecResult, Language
from wasm_runner_protocol.packages import InstallResult, PackageLock, PackageRequest
from wasm_runner_protocol.processes import SignalName, StreamName
from wasm_runner_protocol.tools import (
    ApprovalDecided,
    ApprovalDecision,
    ApprovalEvent,
    ToolAnswer,
    ToolAnswered,
    ToolCallEvent,
    ToolList,
)
from wasm_runner_protocol.usage import BudgetsUpdate, UsageGrouping, UsageReport, UsageUnit, WorkspaceBudgets


async def _chunks(upload: Upload) -> AsyncIterator[bytes]:
    while chunk := await anyio.to_thread.run_sync(upload.file.read, CHUNK):
        yield chunk


class AsyncClient:
    """A wasm-runner service over HTTP, from async code.

        async with AsyncClient("http://127.0.0.1:8080") as client:
            session = await client.create_session()
            async with client.exec_stream(session.id, "print('hi')") as stream:
                async for chunk in stream:
                    print(chunk.text, end="")
            print(stream.result.exit_code)
    """

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT, retry: Retry = Retry(),
                 headers: Mapping[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        base_url = base_url or os.environ.get(calls.URL_VARIABLE) or calls.DEFAULT_URL
        self.retry = retry
        self._http = httpx.AsyncClient(base_url=base_url, headers=client_headers(api_key, headers),
                                       timeout=timeout, transport=transport)

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- sending ----------------------------------------------------------------------------

    async def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        attempt = 0
        while True:
            args = call.request_args()
            if call.upload is not None:
                args["content"] = _chunks(call.upload)
            try:
                response = await self._http.send(self._http.build_request(**args), stream=True)
            except httpx.HTTPError as exc:
                raise TransportError(f"{call.method} {call.path}: {exc}") from exc
            status = response.status_code
            if status < 400 or status in call.accept:
                if not stream:
                    await self._read(response, call)
                return response
            delay = self.retry.delay(attempt, status, response.headers) if call.retry and call.replayable else None
            if delay is None:
                body = await self._read(response, call)
                raise error_for(status, body, response.headers)
            await response.aclose()
            await anyio.sleep(delay)
            attempt += 1
            call.rewind()

    @staticmethod
    async def _read(response: httpx.Response, call: Call) -> bytes:
        try:
            return await response.aread()
        except httpx.HTTPError as exc:
            raise TransportError(f"{call.method} {call.path}: {exc}") from exc
        finally:
            await response.aclose()

    async def _call(self, call: Call, type_: type[calls.T]) -> calls.T:
        return decode(type_, (await self._send(call)).content)

    # -- service -------------------------------------------------------------------------------

    async def health(self) -> Health:
        return await self._call(Call("GET", "/healthz"), Health)

    async def readiness(self) -> Readiness:
        return await self._call(Call("GET", "/readyz", accept=frozenset({503}), retry=False), Readiness)

    async def profiles(self) -> ProfileList:
        return await self._call(Call("GET", "/v1/profiles"), ProfileList)

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(self, id: str | None = None, *, profile: str | None = None,
                             idle_timeout_s: float | None = None, ttl_s: float | None = None,
                             metadata: Mapping[str, str] | None = None, temporary: bool = False,
                             ephemeral: bool = False,
                             packages: PackageRequest | None = None,
                             egress: EgressPolicy | None = None, template: str | None = None,
                             tools: list[str] | None = None,
                       starter: str | None = None) -> SessionInfo:
        body = SessionCreate(id=id, profile=profile, idle_timeout_s=idle_timeout_s, ttl_s=ttl_s,
                             metadata=dict(metadata or {}), temporary=temporary or ephemeral, packages=packages,
                             egress=egress, template=template, tools=tools, starter=starter)
        return await self._call(Call("POST", "/v1/sessions", body=body), SessionInfo)

    async def update_session(self, session_id: str, *,
                             egress: EgressPolicy | None | UnsetType = UNSET) -> SessionInfo:
        return await self._call(Call("PATCH", session_path(session_id), body=SessionPatch(egress=egress)),
                                SessionInfo)

    async def usage(self, *, workspace: str | None = None, member: str | None = None, key: str | None = None,
                    unit: UsageUnit | None = None, since: date | None = None, until: date | None = None,
                    group_by: UsageGrouping = "day") -> UsageReport:
        """What the caller's workspace used (an admin key: any workspace, or all), summed per day, paying key
        or unit; `since`/`until` are UTC days, both included."""
        params = usage_query(workspace, member, key, unit, since, until, group_by)
        return await self._call(Call("GET", "/v1/usage", params=params), UsageReport)

    async def usage_csv(self, *, workspace: str | None = None, member: str | None = None, key: str | None = None,
                        unit: UsageUnit | None = None, since: date | None = None, until: date | None = None,
                        group_by: UsageGrouping = "day") -> str:
        """The same rows as `usage`, as CSV text (a header line first)."""
        params = {**usage_query(workspace, member, key, unit, since, until, group_by), "format": "csv"}
        return (await self._send(Call("GET", "/v1/usage", params=params))).text

    async def workspace_budgets(self, workspace: str) -> WorkspaceBudgets:
        """A workspace's budgets for the month and what it used of them (admin keys)."""
        return await self._call(Call("GET", f"/v1/admin/workspaces/{workspace}/budgets"), WorkspaceBudgets)

    async def set_workspace_budgets(self, workspace: str,
                                    budgets: Mapping[UsageUnit, float | None]) -> WorkspaceBudgets:
        """Set a workspace's budget per unit for the month (None removes its own: the default applies)."""
        body = BudgetsUpdate(budgets=dict(budgets))
        return await self._call(Call("PUT", f"/v1/admin/workspaces/{workspace}/budgets", body=body),
                                WorkspaceBudgets)

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self._call(Call("GET", session_path(session_id)), SessionInfo)

    async def list_sessions(self, *, cursor: str | None = None, limit: int | None = None) -> SessionList:
        return await self._call(Call("GET", "/v1/sessions", params=query(cursor=cursor, limit=limit)), SessionList)

    async def iter_sessions(self, *, page_size: int = 100) -> AsyncIterator[SessionInfo]:
        cursor = None
        while True:
            page = await self.list_sessions(cursor=cursor, limit=page_size)
            for info in page.sessions:
                yield info
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def delete_session(self, session_id: str) -> None:
        await self._send(Call("DELETE", session_path(session_id)))

    async def fork(self, session_id: str, count: int = 1) -> SessionForkResult:
        """`count` new sessions, each a copy of this one's files, packages, network policy and kernel
        state (restored by each copy's first call); `failed` lists copies that could not be made."""
        return await self._call(Call("POST", session_path(session_id) + ":fork", body=SessionFork(count=count)),
                               SessionForkResult)

    async def hibernate(self, session_id: str) -> SessionInfo:
        """Save the session's kernels with its files and drop them now, as after idling (its background
        processes end); its next call restores them. A session running a call is refused (409)."""
        return await self._call(Call("POST", session_path(session_id) + ":hibernate"), SessionInfo)

    async def publish_template(self, name: str, session_id: str) -> TemplateInfo:
        """Publish the session's state (files, packages, kernels) as the workspace's template `name`."""
        return await self._call(Call("POST", "/v1/templates", body=TemplateCreate(name=name, session=session_id)),
                               TemplateInfo)

    async def list_templates(self) -> list[TemplateInfo]:
        return (await self._call(Call("GET", "/v1/templates"), TemplateList)).templates

    async def console_link(self) -> ConsoleLink:
        """A one-time link that signs the console in as this client's key (open it within ten minutes)."""
        return await self._call(Call("POST", "/v1/console/sign-in-links"), ConsoleLink)

    async def list_starters(self) -> list[StarterInfo]:
        """The web starters a session can start with (`create_session(starter=...)`), `ready` where installed."""
        return (await self._call(Call("GET", "/v1/starters"), StarterList)).starters

    async def delete_template(self, name: str) -> None:
        await self._send(Call("DELETE", "/v1/templates/" + segment(name)))

    async def cancel(self, session_id: str) -> CancelResult:
        return await self._call(Call("POST", session_path(session_id, "cancel")), CancelResult)

    # -- packages --------------------------------------------------------------------------------

    async def install(self, session_id: str, python: Iterable[str] = (), *, npm: Iterable[str] = (),
                lock: PackageLock | None = None, index: str | None = None) -> InstallResult:
        """Install packages into the session (a refusal is a result with `ok` false and an `error`)."""
        body = PackageRequest(python=tuple(python), npm=tuple(npm), lock=lock, index=index)
        return await self._call(Call("POST", session_path(session_id, "packages"), body=body), InstallResult)

    async def packages(self, session_id: str) -> PackageLock:
        """The session's lock: give it to `create_session(packages=PackageRequest(lock=...))` to replay it."""
        return await self._call(Call("GET", session_path(session_id, "packages")), PackageLock)

    # -- execution -------------------------------------------------------------------------------

    async def tools(self, session_id: str) -> ToolList:
        """The tools the session's code gets from its profile (its MCP servers), with their generated API
        (`python`, `typescript`) to show a model."""
        return await self._call(Call("GET", session_path(session_id, "tools")), ToolList)

    async def exec(self, session_id: str, code: str | None = None, *, path: str | None = None,
                   language: str | None = None, stdin: str = "", env: Mapping[str, str] | None = None,
                   limits: LimitsArg = None, fresh: bool = False, profile: str | None = None,
                   id: str | None = None, egress: EgressPolicy | None = None,
                   tools: calls.ToolsArg | None = None,
             on_approval: Callable[[ApprovalEvent], bool | Awaitable[bool]] | None = None) -> ExecResult:
        """Run `code` in the session's kernel; `tools` as `Client.exec` takes them (coroutine functions are
        awaited here, others run on a thread)."""
        if tools is not None or on_approval is not None:
            async with self.exec_stream(session_id, code, path=path, language=language, stdin=stdin, env=env,
                                        limits=limits, fresh=fresh, profile=profile, id=id, egress=egress,
                                        tools=tools, on_approval=on_approval) as stream:
                return await stream.collect()
        body = calls.exec_body(code, path=path, language=language, stdin=stdin, env=env, limits=limits,
                               fresh=fresh, profile=profile, id=id, egress=egress)
        return await self._call(Call("POST", session_path(session_id, "exec"), body=body), ExecResult)

    def exec_stream(self, session_id: str, code: str | None = None, *, path: str | None = None,
                    language: str | None = None, stdin: str = "", env: Mapping[str, str] | None = None,
                    limits: LimitsArg = None, fresh: bool = False, profile: str | None = None,
                    id: str | None = None, egress: EgressPolicy | None = None,
                    tools: calls.ToolsArg | None = None,
                    on_approval: Callable[[ApprovalEvent], bool | Awaitable[bool]] | None = None) -> AsyncExecStream[ExecResult]:
        specs, functions = calls.tool_table(tools) if tools is not None else (None, {})
        body = calls.exec_body(code, path=path, language=language, stdin=stdin, env=env, limits=limits,
                               fresh=fresh, profile=profile, id=id, egress=egress, tools=specs)
        answer_to = calls.AnswerTo.session(session_id)
        on_tool_call = (functools.partial(self._answer_stream_event, answer_to, functions, on_approval)
                        if tools is not None or on_approval is not None else None)
        return AsyncExecStream(self, Call("POST", session_path(session_id, "exec"), body=body), ExecResult,
                               on_tool_call, answer_to)

    async def _answer_stream_event(self, answer_to: calls.AnswerTo, functions: dict[str, Callable[..., Any]],
                                   on_approval: Callable[[ApprovalEvent], bool | Awaitable[bool]] | None,
                                   event: ToolCallEvent | ApprovalEvent) -> None:
        if isinstance(event, ApprovalEvent):
            await self._decide(answer_to, on_approval, event)
        else:
            await self._answer_tool_call(answer_to, functions, event)

    async def _decide(self, answer_to: calls.AnswerTo, on_approval: Callable[[ApprovalEvent], bool | Awaitable[bool]] | None,
                      event: ApprovalEvent) -> None:
        """Ask `on_approval` and post its decision (no callback, or one that fails: refused)."""
        try:
            decision = on_approval(event) if on_approval is not None else False
            if inspect.isawaitable(decision):
                decision = await decision
            approve = decision is True
        except Exception:  # noqa: BLE001 - a failing callback refuses the call
            approve = False
        try:
            await self._call(Call("POST", answer_to.approval(event.approval_id),
                                  body=ApprovalDecision(approve=approve)), ApprovalDecided)
        except NotFoundError:
            pass  # the call timed out or its run ended: it is refused already

    async def _answer_tool_call(self, answer_to: calls.AnswerTo, functions: dict[str, Callable[..., Any]],
                                event: ToolCallEvent) -> None:
        """Run the tool the code called and post its answer (a call that ended meanwhile is let go)."""
        function = functions.get(event.tool)
        if function is None:
            answer = ToolAnswer(ok=False, error=f"this client has no tool {event.tool!r}")
        else:
            try:
                if inspect.iscoroutinefunction(function):
                    value = await function(**event.arguments)
                else:
                    value = await anyio.to_thread.run_sync(functools.partial(function, **event.arguments))
                answer = calls.tool_answer(value)
            except Exception as exc:  # noqa: BLE001 - the code gets the tool's error as a ToolError
                answer = calls.tool_failed(exc)
        try:
            await self._call(Call("POST", answer_to.tool_call(event.call_id), body=answer), ToolAnswered)
        except NotFoundError:
            pass  # the call timed out or its run ended: the code has its answer already

    async def process(self, session_id: str, command: list[str], *, stdin: str = "",
                      env: Mapping[str, str] | None = None, limits: LimitsArg = None, profile: str | None = None,
                      id: str | None = None, egress: EgressPolicy | None = None) -> ExecResult:
        body = calls.process_body(command, stdin=stdin, env=env, limits=limits, profile=profile, id=id,
                                  egress=egress)
        return await self._call(Call("POST", session_path(session_id, "process"), body=body), ExecResult)

    def process_stream(self, session_id: str, command: list[str], *, stdin: str = "",
                       env: Mapping[str, str] | None = None, limits: LimitsArg = None,
                       profile: str | None = None, id: str | None = None,
                       egress: EgressPolicy | None = None) -> AsyncExecStream[ExecResult]:
        body = calls.process_body(command, stdin=stdin, env=env, limits=limits, profile=profile, id=id,
                                  egress=egress)
        return AsyncExecStream(self, Call("POST", session_path(session_id, "process"), body=body), ExecResult)

    async def run(self, code: str | None = None, *, language: str | None = None, path: str | None = None,
                  command: list[str] | None = None, files: Mapping[str, str | bytes] | None = None,
                  output_files: Iterable[str] = (), stdin: str = "", env: Mapping[str, str] | None = None,
                  limits: LimitsArg = None, profile: str | None = None, id: str | None = None,
                  egress: EgressPolicy | None = None, outputs: Iterable[str] = (),
                  tools: calls.ToolsArg | None = None,
                  on_approval: Callable[[ApprovalEvent], bool | Awaitable[bool]] | None = None) -> OneShotResult:
        """Run once in a throwaway workspace; `tools` and `on_approval` as `exec` takes them (the run then
        streams, and each call is answered under the id its stream announces)."""
        if tools is not None or on_approval is not None:
            async with self.run_stream(code, language=language, path=path, command=command, files=files,
                                       output_files=output_files, stdin=stdin, env=env, limits=limits,
                                       profile=profile, id=id, egress=egress, outputs=outputs, tools=tools,
                                       on_approval=on_approval) as stream:
                return await stream.collect()
        body = calls.one_shot_body(code, path=path, command=command, language=language, files=files,
                                   output_files=output_files, stdin=stdin, env=env, limits=limits,
                                   profile=profile, id=id, egress=egress, outputs=outputs)
        return await self._call(Call("POST", "/v1/exec", body=body), OneShotResult)

    def run_stream(self, code: str | None = None, *, language: str | None = None, path: str | None = None,
                   command: list[str] | None = None, files: Mapping[str, str | bytes] | None = None,
                   output_files: Iterable[str] = (), stdin: str = "", env: Mapping[str, str] | None = None,
                   limits: LimitsArg = None, profile: str | None = None,
                   id: str | None = None, egress: EgressPolicy | None = None,
                   outputs: Iterable[str] = (), tools: calls.ToolsArg | None = None,
                   on_approval: Callable[[ApprovalEvent], bool | Awaitable[bool]] | None = None,
                   ) -> AsyncExecStream[OneShotResult]:
        specs, functions = calls.tool_table(tools) if tools is not None else (None, {})
        body = calls.one_shot_body(code, path=path, command=command, language=language, files=files,
                                   output_files=output_files, stdin=stdin, env=env, limits=limits,
                                   profile=profile, id=id, egress=egress, outputs=outputs, tools=specs)
        answer_to = calls.AnswerTo()  # the run's id comes first on its stream
        on_tool_call = (functools.partial(self._answer_stream_event, answer_to, functions, on_approval)
                        if tools is not None or on_approval is not None else None)
        return AsyncExecStream(self, Call("POST", "/v1/exec", body=body), OneShotResult, on_tool_call, answer_to)

    # -- background processes and preview ports --------------------------------------------------

    async def start_process(self, session_id: str, command: list[str] | None = None, *, code: str = "",
                            language: Language = "bash", env: Mapping[str, str] | None = None, cwd: str = "",
                            memory_bytes: int | None = None, output_bytes: int | None = None, stdin: bool = True,
                            pty: bool = False, cols: int = 80, rows: int = 24, name: str = "") -> ProcessInfo:
        body = calls.start_body(command, code=code, language=language, env=env, cwd=cwd, memory_bytes=memory_bytes,
                                output_bytes=output_bytes, stdin=stdin, pty=pty, cols=cols, rows=rows, name=name)
        return await self._call(Call("POST", session_path(session_id, "processes"), body=body), ProcessInfo)

    async def list_processes(self, session_id: str) -> ProcessList:
        return await self._call(Call("GET", session_path(session_id, "processes")), ProcessList)

    async def get_process(self, session_id: str, process_id: str) -> ProcessInfo:
        return await self._call(Call("GET", process_path(session_id, process_id)), ProcessInfo)

    async def process_output(self, session_id: str, process_id: str, *, stream: StreamName = "stdout",
                             offset: int = 0, limit: int | None = None,
                             encoding: Literal["utf-8", "base64"] = "utf-8",
                             wait_s: float | None = None) -> ProcessOutput:
        params = calls.output_query(stream, offset, limit, encoding, wait_s)
        call = Call("GET", process_path(session_id, process_id, "output"), params=params)
        return await self._call(call, ProcessOutput)

    def process_output_stream(self, session_id: str, process_id: str, *, stream: StreamName = "stdout",
                              offset: int = 0) -> AsyncProcessOutputStream:
        return AsyncProcessOutputStream(self, session_id, process_id, stream, offset)

    async def send_input(self, session_id: str, process_id: str, data: str | bytes, *,
                         eof: bool = False) -> ProcessStdinResult:
        call = Call("POST", process_path(session_id, process_id, "stdin"), body=calls.stdin_body(data, eof), retry=False)
        return await self._call(call, ProcessStdinResult)

    async def signal_process(self, session_id: str, process_id: str, signal: SignalName = "TERM", *,
                             tree: bool = False) -> ProcessInfo:
        call = Call("POST", process_path(session_id, process_id, "signal"), body=ProcessSignal(signal=signal, tree=tree))
        return await self._call(call, ProcessInfo)

    async def stop_process(self, session_id: str, process_id: str) -> ProcessInfo:
        return await self._call(Call("DELETE", process_path(session_id, process_id)), ProcessInfo)

    async def preview_url(self, session_id: str, port: int, *, expires_in: float | None = None) -> PreviewLink:
        call = Call("POST", session_path(session_id, "ports", f"{int(port)}:presign"),
                    body=PreviewLinkBody(expires_in=expires_in))
        link = await self._call(call, PreviewLink)
        link.url = str(self._http.base_url.join(link.url))  # absolute: the preview's own origin
        return link

    def port_url(self, session_id: str, port: int, path: str = "") -> str:
        return str(self._http.base_url.join(session_path(session_id, "ports", str(int(port)),
                                                         calls.file_path(path.lstrip("/"))).lstrip("/")))

    # -- files -------------------------------------------------------------------------------------

    def _file_call(self, method: str, session_id: str, path: str, **kwargs: Any) -> Call:
        return Call(method, session_path(session_id, "files", calls.file_path(path)), **kwargs)

    async def read_file(self, session_id: str, path: str) -> bytes:
        response = await self._send(self._file_call("GET", session_id, path))
        if calls.is_listing(response.headers):
            raise calls.not_a_file(path)
        return response.content

    async def read_text(self, session_id: str, path: str, encoding: str = "utf-8") -> str:
        return (await self.read_file(session_id, path)).decode(encoding)

    async def download(self, session_id: str, path: str, dest: str | os.PathLike[str] | IO[bytes]) -> int:
        response = await self._send(self._file_call("GET", session_id, path), stream=True)
        try:
            if calls.is_listing(response.headers):
                raise calls.not_a_file(path)
            return await _write_to(dest, response.aiter_bytes(CHUNK))
        finally:
            await response.aclose()

    async def write_file(self, session_id: str, path: str, data: bytes | str | IO[bytes], *,
                         mkdirs: bool = True) -> WriteResult:
        content, upload = calls.body_of(data)
        call = self._file_call("PUT", session_id, path, params=query(mkdirs=mkdirs), content=content, upload=upload)
        return await self._call(call, WriteResult)

    async def upload_file(self, session_id: str, local_path: str | os.PathLike[str], path: str | None = None, *,
                          mkdirs: bool = True) -> WriteResult:
        local = Path(local_path)
        with local.open("rb") as file:
            return await self.write_file(session_id, path or local.name, file, mkdirs=mkdirs)

    async def upload(self, session_id: str, files: Mapping[str, bytes | str | IO[bytes]], *,
                     dir: str = "") -> UploadResult:
        parts: list[tuple[str, bytes | Upload]] = []
        for name, data in files.items():
            parts.append((name, calls.part_of(data)))
        call = Call("POST", session_path(session_id, "files"), params=query(dir=dir or None), multipart=parts)
        return await self._call(call, UploadResult)

    async def delete_file(self, session_id: str, path: str, *, recursive: bool = False) -> DeleteResult:
        call = self._file_call("DELETE", session_id, path, params=query(recursive=recursive or None))
        return await self._call(call, DeleteResult)

    async def edit_file(self, session_id: str, path: str, old_text: str | None = None, new_text: str | None = None,
                        *, replace_all: bool = False, edits: Iterable[TextEdit | tuple[str, str]] | None = None,
                        patch: str | None = None) -> EditResult:
        body = calls.edit_body(old_text, new_text, replace_all=replace_all, edits=edits, patch=patch)
        return await self._call(self._file_call("PATCH", session_id, path, body=body), EditResult)

    async def list_files(self, session_id: str, path: str = "", *, recursive: bool = False,
                         limit: int | None = None) -> FileListing:
        params = query(path=path or None, recursive=recursive or None, limit=limit)
        return await self._call(Call("GET", session_path(session_id, "files"), params=params), FileListing)

    async def glob(self, session_id: str, pattern: str, *, limit: int | None = None) -> GlobResult:
        call = Call("GET", session_path(session_id, "glob"), params=query(pattern=pattern, limit=limit))
        return await self._call(call, GlobResult)

    async def grep(self, session_id: str, pattern: str, path: str = "", *, glob: str | None = None,
                   ignore_case: bool = False, fixed_string: bool = False,
                   max_matches: int | None = None) -> GrepResult:
        params = query(pattern=pattern, path=path or None, glob=glob, ignore_case=ignore_case or None,
                       fixed_string=fixed_string or None, max_matches=max_matches)
        return await self._call(Call("GET", session_path(session_id, "grep"), params=params), GrepResult)

    async def download_archive(self, session_id: str, dest: str | os.PathLike[str] | IO[bytes], path: str = "", *,
                               format: Literal["zip", "tar.gz"] = "zip") -> int:
        call = Call("GET", session_path(session_id, "archive"), params=query(path=path or None, format=format))
        response = await self._send(call, stream=True)
        try:
            return await _write_to(dest, response.aiter_bytes(CHUNK))
        finally:
            await response.aclose()

    async def presign(self, session_id: str, path: str, *, method: Literal["GET", "PUT"] = "GET",
                      expires_in: float | None = None) -> PresignResult:
        """A link that reads (GET) or writes (PUT) one file without a key until it expires; `url` is absolute."""
        call = Call("POST", session_path(session_id, "files", calls.file_path(path) + ":presign"),
                    body=PresignBody(method=method, expires_in=expires_in))
        result = await self._call(call, PresignResult)
        result.url = str(self._http.base_url.join(result.url.lstrip("/")))
        return result

    async def call(self, method: str, path: str, result_type: type[calls.T], *, body: Any = None,
                   params: Mapping[str, Any] | None = None) -> calls.T:
        """Any endpoint (`path` percent-encoded, from "/"), for what the typed methods do not cover:
        `body` (a Struct or JSON-able value) is sent as JSON and the answer decoded as `result_type`."""
        return await self._call(Call(method, path, params=query(**dict(params or {})), body=body), result_type)

    def file_url(self, session_id: str, path: str) -> str:
        return str(self._http.base_url.join(session_path(session_id, "files", calls.file_path(path)).lstrip("/")))


async def _write_to(dest: str | os.PathLike[str] | IO[bytes], chunks: AsyncIterable[bytes]) -> int:
    written = 0
    try:
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as file:
                async for chunk in chunks:
                    await anyio.to_thread.run_sync(file.write, chunk)
                    written += len(chunk)
        else:
            async for chunk in chunks:
                dest.write(chunk)
                written += len(chunk)
    except httpx.HTTPError as exc:
        raise TransportError(f"the download was cut: {exc}") from exc
    return written


class AsyncExecStream(Generic[R]):
    """An execution answered as server-sent events: `async for` the `OutputChunk`s; `result` once done."""

    def __init__(self, client: AsyncClient, call: Call, result_type: type[R],
                 on_tool_call: Callable[[ToolCallEvent | ApprovalEvent], Awaitable[None]] | None = None,
                 answer_to: calls.AnswerTo | None = None) -> None:
        call.headers["Accept"] = "text/event-stream"
        self._client = client
        self._call = call
        self._on_tool_call = on_tool_call
        self._state = StreamState(result_type, answer_to)
        self._response: httpx.Response | None = None
        self._closed = False

    @property
    def result(self) -> R | None:
        return self._state.result

    async def _open(self) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the stream is closed")
        if self._response is None:
            self._response = await self._client._send(self._call, stream=True)
        return self._response

    async def __aenter__(self) -> AsyncExecStream[R]:
        await self._open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._response is not None:
            await self._response.aclose()

    async def __aiter__(self) -> AsyncIterator[OutputChunk]:
        response = await self._open()
        try:
            async for line in response.aiter_lines():
                chunk = self._state.line(line)
                if isinstance(chunk, (ToolCallEvent, ApprovalEvent)):
                    if self._on_tool_call is not None:
                        await self._on_tool_call(chunk)
                elif chunk is not None:
                    yield chunk
            self._state.line("")
        except httpx.HTTPError as exc:
            raise TransportError(f"the event stream was cut: {exc}") from exc
        finally:
            await self.aclose()
        if self._state.result is None:
            raise self._state.ended_early()

    async def collect(self) -> R:
        if self._state.result is None:
            async for _ in self:
                pass
        assert self._state.result is not None
        return self._state.result


class AsyncProcessOutputStream:
    """One stream of a background process, followed as server-sent events: `async for` the `ProcessOutput`
    chunks; `exit` once the process has ended; `next_offset` to resume from."""

    def __init__(self, client: AsyncClient, session_id: str, process_id: str, stream: StreamName,
                 offset: int) -> None:
        self._client = client
        self._call = Call("GET", process_path(session_id, process_id, "output"),
                          params=query(stream=stream, offset=offset), headers={"Accept": "text/event-stream"})
        self._events = OutputEvents(offset)
        self._response: httpx.Response | None = None
        self._closed = False

    @property
    def exit(self) -> ProcessExit | None:
        return self._events.exit

    @property
    def next_offset(self) -> int:
        return self._events.next_offset

    async def _open(self) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the stream is closed")
        if self._response is None:
            self._response = await self._client._send(self._call, stream=True)
        return self._response

    async def __aenter__(self) -> AsyncProcessOutputStream:
        await self._open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._response is not None:
            await self._response.aclose()

    async def __aiter__(self) -> AsyncIterator[ProcessOutput]:
        response = await self._open()
        try:
            async for line in response.aiter_lines():
                chunk = self._events.line(line)
                if chunk is not None:
                    yield chunk
                elif self._events.exit is not None:
                    break
        except httpx.HTTPError as exc:
            raise TransportError(f"the output stream was cut (resume from offset {self.next_offset}): {exc}") from exc
        finally:
            await self.aclose()
        if self._events.exit is None:
            raise self._events.ended_early()
