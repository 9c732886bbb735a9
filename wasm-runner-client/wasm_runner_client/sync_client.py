"""`Client`: the HTTP API from blocking code (httpx underneath)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import date
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Generic, Literal

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
    decode,
    process_path,
    query,
    segment,
    session_path,
)
from wasm_runner_client.errors import NotFoundError, TransportError, error_for
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

USER_AGENT = "wasm-runner-client/0.1"
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
"""Reads may wait as long as an execution may run (the server's maximum is 300 s by default)."""


def client_headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    merged = {"User-Agent": USER_AGENT}
    merged.update(headers or {})
    api_key = api_key if api_key is not None else os.environ.get(calls.API_KEY_VARIABLE)
    if api_key:
        merged["Authorization"] = f"Bearer {api_key}"
    return merged


class Client:
    """A wasm-runner service over HTTP.

        with Client("http://127.0.0.1:8080", api_key="...") as client:
            session = client.create_session()
            result = client.exec(session.id, "x = 6 * 7\\nx")
            print(result.value)                       # '42'

    `api_key` (or $WASM_RUNNER_API_KEY) is sent as `Authorization: Bearer ...`;
    `base_url` defaults to $WASM_RUNNER_URL, then http://127.0.0.1:8080. Calls answered
    429 or 503 are retried as `retry` says (honouring Retry-After). Errors raise
    `ApiError` subclasses carrying the server's code, message and hint.
    """

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT, retry: Retry = Retry(),
                 headers: Mapping[str, str] | None = None, transport: httpx.BaseTransport | None = None) -> None:
        base_url = base_url or os.environ.get(calls.URL_VARIABLE) or calls.DEFAULT_URL
        self.retry = retry
        self._http = httpx.Client(base_url=base_url, headers=client_headers(api_key, headers), timeout=timeout,
                                  transport=transport)

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ----------------------------------------------------------------------------

    def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        attempt = 0
        while True:
            args = call.request_args()
            if call.upload is not None:
                args["content"] = call.upload.chunks()
            try:
                response = self._http.send(self._http.build_request(**args), stream=True)
            except httpx.HTTPError as exc:
                raise TransportError(f"{call.method} {call.path}: {exc}") from exc
            status = response.status_code
            if status < 400 or status in call.accept:
                if not stream:
                    self._read(response, call)
                return response
            delay = self.retry.delay(attempt, status, response.headers) if call.retry and call.replayable else None
            if delay is None:
                body = self._read(response, call)
                raise error_for(status, body, response.headers)
            response.close()
            time.sleep(delay)
            attempt += 1
            call.rewind()

    @staticmethod
    def _read(response: httpx.Response, call: Call) -> bytes:
        try:
            return response.read()
        except httpx.HTTPError as exc:
            raise TransportError(f"{call.method} {call.path}: {exc}") from exc
        finally:
            response.close()

    def _call(self, call: Call, type_: type[calls.T]) -> calls.T:
        return decode(type_, self._send(call).content)

    # -- service -------------------------------------------------------------------------------

    def health(self) -> Health:
        return self._call(Call("GET", "/healthz"), Health)

    def readiness(self) -> Readiness:
        """Whether the service is ready (answered, not raised, when it is not)."""
        return self._call(Call("GET", "/readyz", accept=frozenset({503}), retry=False), Readiness)

    def profiles(self) -> ProfileList:
        return self._call(Call("GET", "/v1/profiles"), ProfileList)

    # -- sessions ------------------------------------------------------------------------------

    def create_session(self, id: str | None = None, *, profile: str | None = None,
                       idle_timeout_s: float | None = None, ttl_s: float | None = None,
                       metadata: Mapping[str, str] | None = None, temporary: bool = False,
                       ephemeral: bool = False,
                       packages: PackageRequest | None = None, egress: EgressPolicy | None = None,
                       template: str | None = None, tools: list[str] | None = None,
                       starter: str | None = None) -> SessionInfo:
        """A new session (cheap: no interpreter or directory until its first use). `egress` narrows its
        profile's network policy for the session's life (403 if wider); `update_session` changes it.
        `starter` ("vite-react", "tanstack-start") puts a web project with its node_modules ready in it."""
        body = SessionCreate(id=id, profile=profile, idle_timeout_s=idle_timeout_s, ttl_s=ttl_s,
                             metadata=dict(metadata or {}), temporary=temporary or ephemeral, packages=packages,
                             egress=egress, template=template, tools=tools, starter=starter)
        return self._call(Call("POST", "/v1/sessions", body=body), SessionInfo)

    def update_session(self, session_id: str, *, egress: EgressPolicy | None | UnsetType = UNSET) -> SessionInfo:
        """Change a live session from its next call on (PATCH): `egress` is its network policy, within its
        profile's (403 if wider); None goes back to the profile's. Its running background processes follow
        the new policy from their next connection on."""
        return self._call(Call("PATCH", session_path(session_id), body=SessionPatch(egress=egress)), SessionInfo)

    def usage(self, *, workspace: str | None = None, member: str | None = None, key: str | None = None,
              unit: UsageUnit | None = None, since: date | None = None, until: date | None = None,
              group_by: UsageGrouping = "day") -> UsageReport:
        """What the caller's workspace used (an admin key: any workspace, or all), summed per day, paying key
        or unit; `since`/`until` are UTC days, both included."""
        params = usage_query(workspace, member, key, unit, since, until, group_by)
        return self._call(Call("GET", "/v1/usage", params=params), UsageReport)

    def usage_csv(self, *, workspace: str | None = None, member: str | None = None, key: str | None = None,
                  unit: UsageUnit | None = None, since: date | None = None, until: date | None = None,
                  group_by: UsageGrouping = "day") -> str:
        """The same rows as `usage`, as CSV text (a header line first)."""
        params = {**usage_query(workspace, member, key, unit, since, until, group_by), "format": "csv"}
        return (self._send(Call("GET", "/v1/usage", params=params))).text

    def workspace_budgets(self, workspace: str) -> WorkspaceBudgets:
        """A workspace's budgets for the month and what it used of them (admin keys)."""
        return self._call(Call("GET", f"/v1/admin/workspaces/{workspace}/budgets"), WorkspaceBudgets)

    def set_workspace_budgets(self, workspace: str,
                              budgets: Mapping[UsageUnit, float | None]) -> WorkspaceBudgets:
        """Set a workspace's budget per unit for the month (None removes its own: the default applies)."""
        body = BudgetsUpdate(budgets=dict(budgets))
        return self._call(Call("PUT", f"/v1/admin/workspaces/{workspace}/budgets", body=body),
                          WorkspaceBudgets)

    def get_session(self, session_id: str) -> SessionInfo:
        return self._call(Call("GET", session_path(session_id)), SessionInfo)

    def list_sessions(self, *, cursor: str | None = None, limit: int | None = None) -> SessionList:
        return self._call(Call("GET", "/v1/sessions", params=query(cursor=cursor, limit=limit)), SessionList)

    def iter_sessions(self, *, page_size: int = 100) -> Iterator[SessionInfo]:
        """Every session, oldest first, fetching page after page."""
        cursor = None
        while True:
            page = self.list_sessions(cursor=cursor, limit=page_size)
            yield from page.sessions
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def delete_session(self, session_id: str) -> None:
        self._send(Call("DELETE", session_path(session_id)))

    def fork(self, session_id: str, count: int = 1) -> SessionForkResult:
        """`count` new sessions, each a copy of this one's files, packages, network policy and kernel
        state (restored by each copy's first call); `failed` lists copies that could not be made."""
        return self._call(Call("POST", session_path(session_id) + ":fork", body=SessionFork(count=count)),
                               SessionForkResult)

    def hibernate(self, session_id: str) -> SessionInfo:
        """Save the session's kernels with its files and drop them now, as after idling (its background
        processes end); its next call restores them. A session running a call is refused (409)."""
        return self._call(Call("POST", session_path(session_id) + ":hibernate"), SessionInfo)

    def publish_template(self, name: str, session_id: str) -> TemplateInfo:
        """Publish the session's state (files, packages, kernels) as the workspace's template `name`."""
        return self._call(Call("POST", "/v1/templates", body=TemplateCreate(name=name, session=session_id)),
                               TemplateInfo)

    def list_templates(self) -> list[TemplateInfo]:
        return (self._call(Call("GET", "/v1/templates"), TemplateList)).templates

    def console_link(self) -> ConsoleLink:
        """A one-time link that signs the console in as this client's key (open it within ten minutes)."""
        return self._call(Call("POST", "/v1/console/sign-in-links"), ConsoleLink)

    def list_starters(self) -> list[StarterInfo]:
        """The web starters a session can start with (`create_session(starter=...)`), `ready` where installed."""
        return (self._call(Call("GET", "/v1/starters"), StarterList)).starters

    def delete_template(self, name: str) -> None:
        self._send(Call("DELETE", "/v1/templates/" + segment(name)))

    def cancel(self, session_id: str) -> CancelResult:
        """Stop the session's running execution (its caller gets a `cancelled` result)."""
        return self._call(Call("POST", session_path(session_id, "cancel")), CancelResult)

    # -- packages --------------------------------------------------------------------------------

    def install(self, session_id: str, python: Iterable[str] = (), *, npm: Iterable[str] = (),
                lock: PackageLock | None = None, index: str | None = None) -> InstallResult:
        """Install packages into the session (a refusal is a result with `ok` false and an `error`)."""
        body = PackageRequest(python=tuple(python), npm=tuple(npm), lock=lock, index=index)
        return self._call(Call("POST", session_path(session_id, "packages"), body=body), InstallResult)

    def packages(self, session_id: str) -> PackageLock:
        """The session's lock: give it to `create_session(packages=PackageRequest(lock=...))` to replay it."""
        return self._call(Call("GET", session_path(session_id, "packages")), PackageLock)

    # -- execution -------------------------------------------------------------------------------

    def tools(self, session_id: str) -> ToolList:
        """The tools the session's code gets from its profile (its MCP servers), with their generated API
        (`python`, `typescript`) to show a model."""
        return self._call(Call("GET", session_path(session_id, "tools")), ToolList)

    def exec(self, session_id: str, code: str | None = None, *, path: str | None = None,
             language: str | None = None, stdin: str = "", env: Mapping[str, str] | None = None,
             limits: LimitsArg = None, fresh: bool = False, profile: str | None = None,
             id: str | None = None, egress: EgressPolicy | None = None,
             tools: calls.ToolsArg | None = None,
             on_approval: Callable[[ApprovalEvent], bool] | None = None) -> ExecResult:
        """Run `code` (or the workspace file `path`) in the session's kernel.

        `tools` (callables with type hints) are what the code may call (`sandbox.tools.<name>(...)`,
        `await tools.<name>({...})`): each call the service allows runs here, in this process, and its
        result (or its exception's message) goes back to the code. The result lists the calls in `tool_calls`.
        `on_approval` decides each call of a tool that needs approval (an `ApprovalEvent`: the tool and its
        arguments): True runs it; without it, or when it raises, such calls are refused."""
        if tools is not None or on_approval is not None:
            with self.exec_stream(session_id, code, path=path, language=language, stdin=stdin, env=env,
                                  limits=limits, fresh=fresh, profile=profile, id=id, egress=egress,
                                  tools=tools, on_approval=on_approval) as stream:
                return stream.collect()
        body = calls.exec_body(code, path=path, language=language, stdin=stdin, env=env, limits=limits,
                               fresh=fresh, profile=profile, id=id, egress=egress)
        return self._call(Call("POST", session_path(session_id, "exec"), body=body), ExecResult)

    def exec_stream(self, session_id: str, code: str | None = None, *, path: str | None = None,
                    language: str | None = None, stdin: str = "", env: Mapping[str, str] | None = None,
                    limits: LimitsArg = None, fresh: bool = False, profile: str | None = None,
                    id: str | None = None, egress: EgressPolicy | None = None,
                    tools: calls.ToolsArg | None = None,
                    on_approval: Callable[[ApprovalEvent], bool] | None = None) -> ExecStream[ExecResult]:
        """Like `exec`, yielding output as it happens; the result is `stream.result` at the end.

            with client.exec_stream(sid, code) as stream:
                for chunk in stream:
                    print(chunk.text, end="")
            print(stream.result.exit_code)

        With `tools`, their calls are answered while the stream is read."""
        specs, functions = calls.tool_table(tools) if tools is not None else (None, {})
        body = calls.exec_body(code, path=path, language=language, stdin=stdin, env=env, limits=limits,
                               fresh=fresh, profile=profile, id=id, egress=egress, tools=specs)
        answer_to = calls.AnswerTo.session(session_id)
        on_tool_call = (functools.partial(self._answer_stream_event, answer_to, functions, on_approval)
                        if tools is not None or on_approval is not None else None)
        return ExecStream(self, Call("POST", session_path(session_id, "exec"), body=body), ExecResult,
                          on_tool_call, answer_to)

    def _answer_stream_event(self, answer_to: calls.AnswerTo, functions: dict[str, Callable[..., Any]],
                             on_approval: Callable[[ApprovalEvent], bool] | None,
                             event: ToolCallEvent | ApprovalEvent) -> None:
        if isinstance(event, ApprovalEvent):
            self._decide(answer_to, on_approval, event)
        else:
            self._answer_tool_call(answer_to, functions, event)

    def _decide(self, answer_to: calls.AnswerTo, on_approval: Callable[[ApprovalEvent], bool] | None,
                event: ApprovalEvent) -> None:
        """Ask `on_approval` and post its decision (no callback, or one that fails: refused)."""
        try:
            approve = on_approval is not None and on_approval(event) is True
        except Exception:  # noqa: BLE001 - a failing callback refuses the call
            approve = False
        try:
            self._call(Call("POST", answer_to.approval(event.approval_id),
                            body=ApprovalDecision(approve=approve)), ApprovalDecided)
        except NotFoundError:
            pass  # the call timed out or its run ended: it is refused already

    def _answer_tool_call(self, answer_to: calls.AnswerTo, functions: dict[str, Callable[..., Any]],
                          event: ToolCallEvent) -> None:
        """Run the tool the code called and post its answer (a call that ended meanwhile is let go)."""
        function = functions.get(event.tool)
        if function is None:
            answer = ToolAnswer(ok=False, error=f"this client has no tool {event.tool!r}")
        else:
            try:
                answer = calls.tool_answer(function(**event.arguments))
            except Exception as exc:  # noqa: BLE001 - the code gets the tool's error as a ToolError
                answer = calls.tool_failed(exc)
        try:
            self._call(Call("POST", answer_to.tool_call(event.call_id), body=answer), ToolAnswered)
        except NotFoundError:
            pass  # the call timed out or its run ended: the code has its answer already

    def process(self, session_id: str, command: list[str], *, stdin: str = "",
                env: Mapping[str, str] | None = None, limits: LimitsArg = None, profile: str | None = None,
                id: str | None = None, egress: EgressPolicy | None = None) -> ExecResult:
        """Run a program natively (bubblewrap) in the session's workspace."""
        body = calls.process_body(command, stdin=stdin, env=env, limits=limits, profile=profile, id=id,
                                  egress=egress)
        return self._call(Call("POST", session_path(session_id, "process"), body=body), ExecResult)

    def process_stream(self, session_id: str, command: list[str], *, stdin: str = "",
                       env: Mapping[str, str] | None = None, limits: LimitsArg = None,
                       profile: str | None = None, id: str | None = None,
                       egress: EgressPolicy | None = None) -> ExecStream[ExecResult]:
        body = calls.process_body(command, stdin=stdin, env=env, limits=limits, profile=profile, id=id,
                                  egress=egress)
        return ExecStream(self, Call("POST", session_path(session_id, "process"), body=body), ExecResult)

    def run(self, code: str | None = None, *, language: str | None = None, path: str | None = None,
            command: list[str] | None = None, files: Mapping[str, str | bytes] | None = None,
            output_files: Iterable[str] = (), stdin: str = "", env: Mapping[str, str] | None = None,
            limits: LimitsArg = None, profile: str | None = None, id: str | None = None,
            egress: EgressPolicy | None = None, outputs: Iterable[str] = (),
            tools: calls.ToolsArg | None = None,
            on_approval: Callable[[ApprovalEvent], bool] | None = None) -> OneShotResult:
        """Run once in a throwaway workspace seeded with `files`, returning the `output_files` asked for
        (`outputs`: their deprecated old name). `tools` and `on_approval` as `exec` takes them (the run then
        streams, and each call is answered under the id its stream announces)."""
        if tools is not None or on_approval is not None:
            with self.run_stream(code, language=language, path=path, command=command, files=files,
                                 output_files=output_files, stdin=stdin, env=env, limits=limits, profile=profile,
                                 id=id, egress=egress, outputs=outputs, tools=tools,
                                 on_approval=on_approval) as stream:
                return stream.collect()
        body = calls.one_shot_body(code, path=path, command=command, language=language, files=files,
                                   output_files=output_files, stdin=stdin, env=env, limits=limits,
                                   profile=profile, id=id, egress=egress, outputs=outputs)
        return self._call(Call("POST", "/v1/exec", body=body), OneShotResult)

    def run_stream(self, code: str | None = None, *, language: str | None = None, path: str | None = None,
                   command: list[str] | None = None, files: Mapping[str, str | bytes] | None = None,
                   output_files: Iterable[str] = (), stdin: str = "", env: Mapping[str, str] | None = None,
                   limits: LimitsArg = None, profile: str | None = None,
                   id: str | None = None, egress: EgressPolicy | None = None,
                   outputs: Iterable[str] = (), tools: calls.ToolsArg | None = None,
                   on_approval: Callable[[ApprovalEvent], bool] | None = None) -> ExecStream[OneShotResult]:
        specs, functions = calls.tool_table(tools) if tools is not None else (None, {})
        body = calls.one_shot_body(code, path=path, command=command, language=language, files=files,
                                   output_files=output_files, stdin=stdin, env=env, limits=limits,
                                   profile=profile, id=id, egress=egress, outputs=outputs, tools=specs)
        answer_to = calls.AnswerTo()  # the run's id comes first on its stream
        on_tool_call = (functools.partial(self._answer_stream_event, answer_to, functions, on_approval)
                        if tools is not None or on_approval is not None else None)
        return ExecStream(self, Call("POST", "/v1/exec", body=body), OneShotResult, on_tool_call, answer_to)

    # -- background processes and preview ports --------------------------------------------------

    def start_process(self, session_id: str, command: list[str] | None = None, *, code: str = "",
                      language: Language = "bash", env: Mapping[str, str] | None = None, cwd: str = "",
                      memory_bytes: int | None = None, output_bytes: int | None = None, stdin: bool = True,
                      pty: bool = False, cols: int = 80, rows: int = 24, name: str = "") -> ProcessInfo:
        """Start a process that keeps running after the call (natively, in the session's sandbox); returns at once.

        Give `command` (an argv) or `code` in `language`. Its output is kept by the server
        (`output_bytes` per stream, the oldest dropped past it) and read with `process_output`.
        """
        body = calls.start_body(command, code=code, language=language, env=env, cwd=cwd, memory_bytes=memory_bytes,
                                output_bytes=output_bytes, stdin=stdin, pty=pty, cols=cols, rows=rows, name=name)
        return self._call(Call("POST", session_path(session_id, "processes"), body=body), ProcessInfo)

    def list_processes(self, session_id: str) -> ProcessList:
        return self._call(Call("GET", session_path(session_id, "processes")), ProcessList)

    def get_process(self, session_id: str, process_id: str) -> ProcessInfo:
        return self._call(Call("GET", process_path(session_id, process_id)), ProcessInfo)

    def process_output(self, session_id: str, process_id: str, *, stream: StreamName = "stdout", offset: int = 0,
                       limit: int | None = None, encoding: Literal["utf-8", "base64"] = "utf-8",
                       wait_s: float | None = None) -> ProcessOutput:
        """Output of one stream from byte `offset`; ask from `next_offset` next time (nothing lost or repeated).

        `wait_s` waits that long for bytes past `offset` when there are none yet."""
        params = calls.output_query(stream, offset, limit, encoding, wait_s)
        return self._call(Call("GET", process_path(session_id, process_id, "output"), params=params), ProcessOutput)

    def process_output_stream(self, session_id: str, process_id: str, *, stream: StreamName = "stdout",
                              offset: int = 0) -> ProcessOutputStream:
        """Follow one stream from `offset` as it is written (server-sent events), until the process ends.

            with client.process_output_stream(sid, pid) as output:
                for chunk in output:
                    print(chunk.data, end="")
            print(output.exit.exit_code)

        After a cut connection, follow again from `output.next_offset`."""
        return ProcessOutputStream(self, session_id, process_id, stream, offset)

    def send_input(self, session_id: str, process_id: str, data: str | bytes, *, eof: bool = False) -> ProcessStdinResult:
        """Write to the process's stdin (its terminal for a pty process); `eof` closes it afterwards."""
        call = Call("POST", process_path(session_id, process_id, "stdin"), body=calls.stdin_body(data, eof), retry=False)
        return self._call(call, ProcessStdinResult)

    def signal_process(self, session_id: str, process_id: str, signal: SignalName = "TERM", *,
                       tree: bool = False) -> ProcessInfo:
        """Send `signal` to the process (`tree`: to every process of its sandbox)."""
        call = Call("POST", process_path(session_id, process_id, "signal"), body=ProcessSignal(signal=signal, tree=tree))
        return self._call(call, ProcessInfo)

    def stop_process(self, session_id: str, process_id: str) -> ProcessInfo:
        """Stop the process and its whole tree (TERM, then KILL after the server's grace period)."""
        return self._call(Call("DELETE", process_path(session_id, process_id)), ProcessInfo)

    def preview_url(self, session_id: str, port: int, *, expires_in: float | None = None) -> PreviewLink:
        """A link to the server listening on `port` in the session's sandbox, for a browser (no key) until it
        expires; `url` is the preview's root on an origin of its own (`{port}-{grant}.localhost:{preview port}`
        or the service's preview domain), absolute, ending with "/"."""
        call = Call("POST", session_path(session_id, "ports", f"{int(port)}:presign"),
                    body=PreviewLinkBody(expires_in=expires_in))
        link = self._call(call, PreviewLink)
        link.url = str(self._http.base_url.join(link.url))  # absolute: the preview's own origin
        return link

    def port_url(self, session_id: str, port: int, path: str = "") -> str:
        """The API's URL of `path` on the server on `port` in the session's sandbox: with this client's
        Authorization it answers 307 to the same path on the preview's own origin (which needs no key)."""
        return str(self._http.base_url.join(session_path(session_id, "ports", str(int(port)),
                                                         calls.file_path(path.lstrip("/"))).lstrip("/")))

    # -- files -------------------------------------------------------------------------------------

    def _file_call(self, method: str, session_id: str, path: str, **kwargs: Any) -> Call:
        return Call(method, session_path(session_id, "files", calls.file_path(path)), **kwargs)

    def read_file(self, session_id: str, path: str) -> bytes:
        response = self._send(self._file_call("GET", session_id, path))
        if calls.is_listing(response.headers):
            raise calls.not_a_file(path)
        return response.content

    def read_text(self, session_id: str, path: str, encoding: str = "utf-8") -> str:
        return self.read_file(session_id, path).decode(encoding)

    def download(self, session_id: str, path: str, dest: str | os.PathLike[str] | IO[bytes]) -> int:
        """Stream a workspace file to a local path or a binary file object; the bytes written."""
        response = self._send(self._file_call("GET", session_id, path), stream=True)
        try:
            if calls.is_listing(response.headers):
                raise calls.not_a_file(path)
            return _write_to(dest, response.iter_bytes(CHUNK))
        finally:
            response.close()

    def write_file(self, session_id: str, path: str, data: bytes | str | IO[bytes], *,
                   mkdirs: bool = True) -> WriteResult:
        """Write (atomically replace) a file: bytes, text (UTF-8), or a binary file object (streamed)."""
        content, upload = calls.body_of(data)
        call = self._file_call("PUT", session_id, path, params=query(mkdirs=mkdirs), content=content, upload=upload)
        return self._call(call, WriteResult)

    def upload_file(self, session_id: str, local_path: str | os.PathLike[str], path: str | None = None, *,
                    mkdirs: bool = True) -> WriteResult:
        """Stream a local file into the workspace (at `path`, by default its file name)."""
        local = Path(local_path)
        with local.open("rb") as file:
            return self.write_file(session_id, path or local.name, file, mkdirs=mkdirs)

    def upload(self, session_id: str, files: Mapping[str, bytes | str | IO[bytes]], *, dir: str = "") -> UploadResult:
        """Several files in one multipart request: workspace path (under `dir`) -> contents."""
        parts: list[tuple[str, bytes | calls.Upload]] = []
        for name, data in files.items():
            parts.append((name, calls.part_of(data)))
        call = Call("POST", session_path(session_id, "files"), params=query(dir=dir or None), multipart=parts)
        return self._call(call, UploadResult)

    def delete_file(self, session_id: str, path: str, *, recursive: bool = False) -> DeleteResult:
        return self._call(self._file_call("DELETE", session_id, path, params=query(recursive=recursive or None)),
                          DeleteResult)

    def edit_file(self, session_id: str, path: str, old_text: str | None = None, new_text: str | None = None, *,
                  replace_all: bool = False, edits: Iterable[TextEdit | tuple[str, str]] | None = None,
                  patch: str | None = None) -> EditResult:
        """Exact search-and-replace (`old_text` -> `new_text`), several at once (`edits`), or a unified diff."""
        body = calls.edit_body(old_text, new_text, replace_all=replace_all, edits=edits, patch=patch)
        return self._call(self._file_call("PATCH", session_id, path, body=body), EditResult)

    def list_files(self, session_id: str, path: str = "", *, recursive: bool = False,
                   limit: int | None = None) -> FileListing:
        params = query(path=path or None, recursive=recursive or None, limit=limit)
        return self._call(Call("GET", session_path(session_id, "files"), params=params), FileListing)

    def glob(self, session_id: str, pattern: str, *, limit: int | None = None) -> GlobResult:
        return self._call(Call("GET", session_path(session_id, "glob"), params=query(pattern=pattern, limit=limit)),
                          GlobResult)

    def grep(self, session_id: str, pattern: str, path: str = "", *, glob: str | None = None,
             ignore_case: bool = False, fixed_string: bool = False, max_matches: int | None = None) -> GrepResult:
        params = query(pattern=pattern, path=path or None, glob=glob, ignore_case=ignore_case or None,
                       fixed_string=fixed_string or None, max_matches=max_matches)
        return self._call(Call("GET", session_path(session_id, "grep"), params=params), GrepResult)

    def download_archive(self, session_id: str, dest: str | os.PathLike[str] | IO[bytes], path: str = "", *,
                         format: Literal["zip", "tar.gz"] = "zip") -> int:
        """Stream a folder of the workspace as a zip or tar.gz archive; the bytes written."""
        call = Call("GET", session_path(session_id, "archive"), params=query(path=path or None, format=format))
        response = self._send(call, stream=True)
        try:
            return _write_to(dest, response.iter_bytes(CHUNK))
        finally:
            response.close()

    def presign(self, session_id: str, path: str, *, method: Literal["GET", "PUT"] = "GET",
                expires_in: float | None = None) -> PresignResult:
        """A link that reads (GET) or writes (PUT) one file without a key until it expires; `url` is absolute."""
        call = Call("POST", session_path(session_id, "files", calls.file_path(path) + ":presign"),
                    body=PresignBody(method=method, expires_in=expires_in))
        result = self._call(call, PresignResult)
        result.url = str(self._http.base_url.join(result.url.lstrip("/")))
        return result

    def call(self, method: str, path: str, result_type: type[calls.T], *, body: Any = None,
             params: Mapping[str, Any] | None = None) -> calls.T:
        """Any endpoint (`path` percent-encoded, from "/"), for what the typed methods do not cover:
        `body` (a Struct or JSON-able value) is sent as JSON and the answer decoded as `result_type`."""
        return self._call(Call(method, path, params=query(**dict(params or {})), body=body), result_type)

    def file_url(self, session_id: str, path: str) -> str:
        """The URL of a workspace file (GET it with this client's Authorization header)."""
        return str(self._http.base_url.join(session_path(session_id, "files", calls.file_path(path)).lstrip("/")))


def _write_to(dest: str | os.PathLike[str] | IO[bytes], chunks: Iterable[bytes]) -> int:
    written = 0
    try:
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as file:
                for chunk in chunks:
                    file.write(chunk)
                    written += len(chunk)
        else:
            for chunk in chunks:
                dest.write(chunk)
                written += len(chunk)
    except httpx.HTTPError as exc:
        raise TransportError(f"the download was cut: {exc}") from exc
    return written


class ExecStream(Generic[R]):
    """An execution answered as server-sent events: iterate for `OutputChunk`s; `result` once done.

    The request is sent when the stream is entered or first iterated (a 429 is retried
    then, like any call); an `error` event raises the matching `ApiError`. Leaving the
    `with` block early closes the connection, which cancels the execution.
    """

    def __init__(self, client: Client, call: Call, result_type: type[R],
                 on_tool_call: Callable[[ToolCallEvent | ApprovalEvent], None] | None = None,
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
        """The final result; None until the stream has been read to its end."""
        return self._state.result

    def _open(self) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the stream is closed")
        if self._response is None:
            self._response = self._client._send(self._call, stream=True)
        return self._response

    def __enter__(self) -> ExecStream[R]:
        self._open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        if self._response is not None:
            self._response.close()

    def __iter__(self) -> Iterator[OutputChunk]:
        response = self._open()
        try:
            for line in response.iter_lines():
                chunk = self._state.line(line)
                if isinstance(chunk, (ToolCallEvent, ApprovalEvent)):
                    if self._on_tool_call is not None:
                        self._on_tool_call(chunk)
                elif chunk is not None:
                    yield chunk
            self._state.line("")
        except httpx.HTTPError as exc:
            raise TransportError(f"the event stream was cut: {exc}") from exc
        finally:
            self.close()
        if self._state.result is None:
            raise self._state.ended_early()

    def collect(self) -> R:
        """Read to the end (discarding chunks not yet read) and return the result."""
        if self._state.result is None:
            for _ in self:
                pass
        assert self._state.result is not None
        return self._state.result


class ProcessOutputStream:
    """One stream of a background process, followed as server-sent events: iterate for `ProcessOutput`
    chunks as they are written; `exit` says how the process ended once it has.

    The request is sent when the stream is entered or first iterated. `next_offset` is
    where the last chunk ended: a new stream from there resumes without loss or repeat.
    """

    def __init__(self, client: Client, session_id: str, process_id: str, stream: StreamName, offset: int) -> None:
        self._client = client
        self._call = Call("GET", process_path(session_id, process_id, "output"),
                          params=query(stream=stream, offset=offset), headers={"Accept": "text/event-stream"})
        self._events = OutputEvents(offset)
        self._response: httpx.Response | None = None
        self._closed = False

    @property
    def exit(self) -> ProcessExit | None:
        """How the process ended; None until the stream has been read to its end."""
        return self._events.exit

    @property
    def next_offset(self) -> int:
        return self._events.next_offset

    def _open(self) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the stream is closed")
        if self._response is None:
            self._response = self._client._send(self._call, stream=True)
        return self._response

    def __enter__(self) -> ProcessOutputStream:
        self._open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        if self._response is not None:
            self._response.close()

    def __iter__(self) -> Iterator[ProcessOutput]:
        response = self._open()
        try:
            for line in response.iter_lines():
                chunk = self._events.line(line)
                if chunk is not None:
                    yield chunk
                elif self._events.exit is not None:
                    break
        except httpx.HTTPError as exc:
            raise TransportError(f"the output stream was cut (resume from offset {self.next_offset}): {exc}") from exc
        finally:
            self.close()
        if self._events.exit is None:
            raise self._events.ended_early()


def usage_query(workspace: str | None, member: str | None, key: str | None, unit: str | None, since: date | None,
                 until: date | None, group_by: str) -> dict[str, str]:
    return query(workspace=workspace, member=member, key=key, unit=unit,
                 **{"from": since.isoformat() if since else None, "to": until.isoformat() if until else None},
                 group_by=group_by)
