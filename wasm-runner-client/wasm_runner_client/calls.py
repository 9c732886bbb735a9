"""The HTTP API without I/O: what each call sends, how answers decode, when to retry, how a stream reads.

The sync and async clients both build a `Call` here and run it with their own httpx
client, so the two differ only in how they wait.
"""

from __future__ import annotations

import base64
import os
import random
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Generic, TypeVar, cast
from urllib.parse import quote

import msgspec

from wasm_runner_client.errors import ApiError, ConflictError, error_for, parse_retry_after
from wasm_runner_client.wire import (
    Base64File,
    ExecBody,
    FileEdit,
    LimitsPatch,
    OneShotBody,
    OutputChunk,
    ProcessBody,
    ProcessExit,
    ProcessOutput,
    ProcessStart,
    ProcessStdin,
    TextEdit,
)
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.execution import ExecResult, Language, Limits
from wasm_runner_protocol.processes import DEFAULT_RING_BYTES
from wasm_runner_protocol.tools import ApprovalEvent, RunStarted, ToolAnswer, ToolCallEvent, ToolSpec, spec_of

T = TypeVar("T")
R = TypeVar("R", bound=ExecResult)

CHUNK = 256 * 1024
"""Bytes per read when streaming a file up or down."""

DEFAULT_URL = "http://127.0.0.1:8080"
URL_VARIABLE = "WASM_RUNNER_URL"
API_KEY_VARIABLE = "WASM_RUNNER_API_KEY"

LimitsArg = LimitsPatch | Limits | Mapping[str, Any] | None
"""Limits for one call: a `LimitsPatch` or a mapping (only the fields given), or a core `Limits` (every field)."""

_encoder = msgspec.json.Encoder()
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def decode(type_: type[T], body: bytes) -> T:
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    return cast(T, decoder.decode(body))  # (a decoder per type: its result is that type)


# -- retries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Retry:
    """Retries of a call answered 429 (no execution slot) or 503 (shutting down, not ready).

    Both are answered before any work is done, so retrying is safe for every method.
    The wait honours Retry-After when the server sends it; otherwise it backs off
    exponentially with jitter. A Retry-After longer than `max_retry_after_s` is not
    waited for: the error is raised at once.
    """

    attempts: int = 3
    """Retries after the first try (0 disables retrying)."""
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    statuses: frozenset[int] = frozenset({429, 503})

    def delay(self, attempt: int, status: int, headers: Mapping[str, str]) -> float | None:
        """Seconds to wait before retry `attempt + 1`, or None to give up and raise."""
        if status not in self.statuses or attempt >= self.attempts:
            return None
        after = parse_retry_after(headers.get("retry-after"))
        if after is not None:
            if after > self.max_retry_after_s:
                return None
            return after + random.uniform(0, min(0.1 * after, 0.25))
        return min(self.max_backoff_s, self.backoff_s * 2.0 ** attempt) * random.uniform(0.5, 1.0)


NO_RETRY = Retry(attempts=0)


# -- calls --------------------------------------------------------------------------------------


@dataclass
class Upload:
    """A request body read from a file object in chunks; rewound before a retry when seekable."""

    file: IO[bytes]
    start: int | None = None
    size: int | None = None

    def __post_init__(self) -> None:
        try:
            if self.file.seekable():
                self.start = self.file.tell()
        except (AttributeError, OSError, ValueError):
            self.start = None
        try:
            self.size = os.fstat(self.file.fileno()).st_size - (self.start or 0)
        except (AttributeError, OSError, ValueError, TypeError):
            self.size = None

    @property
    def replayable(self) -> bool:
        return self.start is not None

    def rewind(self) -> None:
        if self.start is not None:
            self.file.seek(self.start)

    def chunks(self) -> Iterable[bytes]:
        while chunk := self.file.read(CHUNK):
            yield chunk


@dataclass
class Call:
    """One HTTP request of the API and what its answer decodes to."""

    method: str
    path: str
    """Already percent-encoded, starting with "/"."""
    params: dict[str, str] | None = None
    body: Any = None
    """Sent as JSON (a Struct or any value msgspec encodes)."""
    content: bytes | None = None
    upload: Upload | None = None
    multipart: list[tuple[str, bytes | Upload]] | None = None
    """(workspace path, contents) pairs for a multipart upload."""
    headers: dict[str, str] = field(default_factory=dict)
    accept: frozenset[int] = frozenset()
    """Error statuses answered with a normal body (GET /readyz answers 503 with a Readiness)."""
    retry: bool = True

    @property
    def replayable(self) -> bool:
        if self.upload is not None and not self.upload.replayable:
            return False
        return all(not isinstance(c, Upload) or c.replayable for _, c in self.multipart or [])

    def rewind(self) -> None:
        if self.upload is not None:
            self.upload.rewind()
        for _, content in self.multipart or []:
            if isinstance(content, Upload):
                content.rewind()

    def request_args(self) -> dict[str, Any]:
        """Keyword arguments for httpx's `build_request` (except the streamed body, see the clients)."""
        headers = dict(self.headers)
        args: dict[str, Any] = {"method": self.method, "url": self.path, "params": self.params, "headers": headers}
        if self.body is not None:
            args["content"] = _encoder.encode(self.body)
            headers["Content-Type"] = "application/json"
        elif self.content is not None:
            args["content"] = self.content
            headers.setdefault("Content-Type", "application/octet-stream")
        elif self.upload is not None:
            headers.setdefault("Content-Type", "application/octet-stream")
            if self.upload.size is not None:
                headers["Content-Length"] = str(self.upload.size)
        elif self.multipart is not None:
            args["files"] = [("file", (quote(name, safe="/"), c.file if isinstance(c, Upload) else c,
                                       "application/octet-stream")) for name, c in self.multipart]
        return args


# -- building calls -------------------------------------------------------------------------------


def segment(value: str) -> str:
    """One path segment (a session id), percent-encoded."""
    return quote(value, safe="")


def file_path(path: str) -> str:
    """A workspace path in a URL: each segment percent-encoded, `/` kept.

    "." and ".." segments are encoded too (%2E), so no HTTP library resolves them into
    another URL: the server sees them and refuses a path that leaves the workspace.
    """
    return "/".join(part.replace(".", "%2E") if part and not part.strip(".") else quote(part, safe="")
                    for part in path.split("/"))


def session_path(session_id: str, *rest: str) -> str:
    return "/".join(("/v1/sessions", segment(session_id), *rest))


def limits_patch(limits: LimitsArg) -> LimitsPatch | None:
    if limits is None or isinstance(limits, LimitsPatch):
        return limits
    if isinstance(limits, Limits):
        return LimitsPatch.from_limits(limits)
    return msgspec.convert(dict(limits), LimitsPatch)


def _language(language: str | None) -> Any:
    return msgspec.UNSET if language is None else language


def exec_body(code: str | None, *, path: str | None, language: str | None, stdin: str,
              env: Mapping[str, str] | None, limits: LimitsArg, fresh: bool, profile: str | None,
              id: str | None, egress: EgressPolicy | None = None, tools: list[ToolSpec] | None = None) -> ExecBody:
    return ExecBody(language=_language(language), code=code, path=path, stdin=stdin, env=dict(env or {}),
                    limits=limits_patch(limits), fresh=fresh, profile=profile, id=id, egress=egress, tools=tools)


def process_body(command: list[str], *, stdin: str, env: Mapping[str, str] | None, limits: LimitsArg,
                 profile: str | None, id: str | None, egress: EgressPolicy | None = None) -> ProcessBody:
    return ProcessBody(command=list(command), stdin=stdin, env=dict(env or {}), limits=limits_patch(limits),
                       profile=profile, id=id, egress=egress)


def process_path(session_id: str, process_id: str, *rest: str) -> str:
    return session_path(session_id, "processes", segment(process_id), *rest)


def start_body(command: list[str] | None, *, code: str, language: Language, env: Mapping[str, str] | None, cwd: str,
               memory_bytes: int | None, output_bytes: int | None, stdin: bool, pty: bool, cols: int, rows: int,
               name: str) -> ProcessStart:
    return ProcessStart(command=list(command) if command is not None else None, code=code, language=language,
                        env=dict(env or {}), cwd=cwd, memory_bytes=memory_bytes,
                        output_bytes=output_bytes or DEFAULT_RING_BYTES, stdin=stdin, pty=pty, cols=cols, rows=rows,
                        name=name)


def stdin_body(data: str | bytes, eof: bool) -> ProcessStdin:
    """Text is sent as UTF-8; bytes as base64, so any byte reaches the process."""
    if isinstance(data, str):
        return ProcessStdin(data=data, eof=eof)
    return ProcessStdin(data=base64.b64encode(bytes(data)).decode("ascii"), encoding="base64", eof=eof)


def output_query(stream: str, offset: int, limit: int | None, encoding: str, wait_s: float | None) -> dict[str, str]:
    return query(stream=stream, offset=offset, limit=limit, encoding=encoding if encoding != "utf-8" else None,
                 wait_s=wait_s or None)


def one_shot_body(code: str | None, *, path: str | None, command: list[str] | None, language: str | None,
                  files: Mapping[str, str | bytes] | None, output_files: Iterable[str], stdin: str,
                  env: Mapping[str, str] | None, limits: LimitsArg, profile: str | None,
                  id: str | None, egress: EgressPolicy | None = None, outputs: Iterable[str] = (),
                  tools: list[ToolSpec] | None = None) -> OneShotBody:
    """`outputs`: the deprecated name of `output_files` (warns; a result's `outputs` are display outputs)."""
    outputs = list(outputs)
    if outputs:
        warnings.warn("run(outputs=...) is deprecated: pass output_files=... (the same paths or patterns)",
                      DeprecationWarning, stacklevel=3)
        output_files = [*output_files, *outputs]
    inputs: dict[str, str | Base64File] = {}
    for name, content in (files or {}).items():
        inputs[name] = content if isinstance(content, str) else Base64File(base64=bytes(content))
    return OneShotBody(language=_language(language), code=code, path=path,
                       command=list(command) if command is not None else None, stdin=stdin, env=dict(env or {}),
                       limits=limits_patch(limits), profile=profile, id=id, files=inputs,
                       output_files=list(output_files),
                       egress=egress, tools=tools)


def edit_body(old_text: str | None, new_text: str | None, *, replace_all: bool,
              edits: Iterable[TextEdit | tuple[str, str]] | None, patch: str | None) -> FileEdit:
    listed = None
    if edits is not None:
        listed = [e if isinstance(e, TextEdit) else TextEdit(old_text=e[0], new_text=e[1]) for e in edits]
    return FileEdit(old_text=old_text, new_text=new_text, replace_all=replace_all, edits=listed, patch=patch)


def query(**values: Any) -> dict[str, str]:
    """Query parameters, leaving out None; booleans as true/false."""
    params: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            continue
        params[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return params


def part_of(data: bytes | str | IO[bytes]) -> bytes | Upload:
    """Text and bytes are sent as they are; a file object is streamed."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    return Upload(data)


def body_of(data: bytes | str | IO[bytes]) -> tuple[bytes | None, Upload | None]:
    part = part_of(data)
    return (part, None) if isinstance(part, bytes) else (None, part)


# -- server-sent events -----------------------------------------------------------------------------


class EventParser:
    """Turns the lines of a text/event-stream into (event, data) pairs."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, str] | None:
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            if not self._data and not self._event:
                return None
            event = (self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


# -- caller-side tools (code mode) -------------------------------------------------------------------

ToolsArg = Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]]
"""Tools as a caller gives them: callables with type hints (named after themselves), or callables by name."""


def tool_table(tools: ToolsArg) -> tuple[list[ToolSpec], dict[str, Callable[..., Any]]]:
    """The specs the service is sent (schemas from type hints) and the functions by name."""
    items = tools.items() if isinstance(tools, Mapping) else ((None, fn) for fn in tools)
    specs: list[ToolSpec] = []
    functions: dict[str, Callable[..., Any]] = {}
    for name, function in items:
        spec = spec_of(function, name=name)
        if spec.name in functions:
            raise ValueError(f"two tools are named {spec.name!r}")
        specs.append(spec)
        functions[spec.name] = function
    return specs, functions


def tool_answer(value: Any) -> ToolAnswer:
    """A tool's result as the answer posted back (an error answer if JSON cannot carry it)."""
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        return ToolAnswer(ok=False, error=f"the tool returned a value JSON cannot carry: {exc}")
    return ToolAnswer(ok=True, value=value)


def tool_failed(exc: BaseException) -> ToolAnswer:
    """A tool's exception as the answer posted back: the guest's ToolError carries its message."""
    return ToolAnswer(ok=False, error=(str(exc) or type(exc).__name__)[:16384])


class AnswerTo:
    """Where a stream's tool-call answers and approval decisions go: under the session, or under the
    one-shot run's id once its stream has announced it (the `run` event)."""

    def __init__(self, base: str | None = None) -> None:
        self.base = base

    @classmethod
    def session(cls, session_id: str) -> AnswerTo:
        return cls(session_path(session_id))

    def run(self, run_id: str) -> None:
        self.base = "/v1/exec/" + segment(run_id)

    def tool_call(self, call_id: str) -> str:
        return f"{self._base()}/tool-calls/{segment(call_id)}"

    def approval(self, approval_id: str) -> str:
        return f"{self._base()}/approvals/{segment(approval_id)}"

    def _base(self) -> str:
        if self.base is None:
            raise ApiError(None, ErrorCode.STREAM_ENDED, "the run's stream asked for an answer before it gave its id",
                           "the server is older than this client: update it to use tools= in one-shot runs")
        return self.base


def tool_call_path(session_id: str, call_id: str) -> str:
    return AnswerTo.session(session_id).tool_call(call_id)


def approval_path(session_id: str, approval_id: str) -> str:
    return AnswerTo.session(session_id).approval(approval_id)


class StreamState(Generic[R]):
    """What a stream of an execution has delivered: chunks as they come, then the result."""

    def __init__(self, result_type: type[R], answer_to: AnswerTo | None = None) -> None:
        self.result_type = result_type
        self.parser = EventParser()
        self.result: R | None = None
        self.answer_to = answer_to

    def line(self, line: str) -> OutputChunk | ToolCallEvent | ApprovalEvent | None:
        """The output chunk (or tool call, or call waiting for approval) a line completes, if any; sets
        `result` on the final event; raises an `error` event."""
        event = self.parser.feed(line)
        if event is None:
            return None
        name, data = event
        if name in ("stdout", "stderr"):
            text = msgspec.json.decode(data.encode("utf-8"), type=dict).get("text", "")
            return OutputChunk(stream="stdout" if name == "stdout" else "stderr", text=text)
        if name == "tool_call":
            return decode(ToolCallEvent, data.encode("utf-8"))
        if name == "approval_required":
            return decode(ApprovalEvent, data.encode("utf-8"))
        if name == "run" and self.answer_to is not None:
            self.answer_to.run(decode(RunStarted, data.encode("utf-8")).run_id)
        if name == "result":
            self.result = decode(self.result_type, data.encode("utf-8"))
        elif name == "error":
            raise error_for(None, data.encode("utf-8"))
        return None

    def ended_early(self) -> ApiError:
        return ApiError(None, ErrorCode.STREAM_ENDED, "the event stream ended without a result",
                        "the connection was cut or the server stopped; run the code again")


class OutputEvents:
    """What an output stream of a background process has delivered: chunks as they come, then its end."""

    def __init__(self, offset: int) -> None:
        self.parser = EventParser()
        self.next_offset = offset
        """Where a new stream resumes without loss or repeat (the last chunk's end)."""
        self.exit: ProcessExit | None = None

    def line(self, line: str) -> ProcessOutput | None:
        """The chunk a line completes, if any; sets `exit` on the last event; raises an `error` event."""
        event = self.parser.feed(line)
        if event is None:
            return None
        name, data = event
        if name == "output":
            chunk = decode(ProcessOutput, data.encode("utf-8"))
            self.next_offset = chunk.next_offset
            return chunk
        if name == "exit":
            self.exit = decode(ProcessExit, data.encode("utf-8"))
        elif name == "error":
            raise error_for(None, data.encode("utf-8"))
        return None

    def ended_early(self) -> ApiError:
        return ApiError(None, ErrorCode.STREAM_ENDED, "the output stream ended before the process did",
                        f"the connection was cut or the server stopped; follow again from offset={self.next_offset}")


def not_a_file(path: str) -> ConflictError:
    return ConflictError(409, "is_a_directory", f"{path!r} is a directory", "use list_files for its entries")


def is_listing(headers: Mapping[str, str]) -> bool:
    """GET on a directory answers its listing as JSON; a file's answer always has Accept-Ranges."""
    return "accept-ranges" not in headers and headers.get("content-type", "").startswith("application/json")
