"""Wire shapes of a session's background processes, terminals and preview ports."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from wasm_runner_protocol.execution import Language

MiB = 1024 * 1024

ProcessState = Literal["starting", "running", "exited", "killed", "failed"]
StreamName = Literal["stdout", "stderr"]
SignalName = Literal["TERM", "INT", "KILL", "HUP", "QUIT", "USR1", "USR2"]

DEFAULT_RING_BYTES = 1 * MiB
"""Output kept per stream of a background process: the oldest bytes are dropped past it (and counted)."""
MAX_RING_BYTES = 16 * MiB


class ProcessStart(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """Start a process that keeps running after the call returns (natively, in the session's sandbox).

    Either `command` (an argv) or `code` with `language` (bash, sh, python, javascript, typescript)."""

    command: list[str] | None = None
    code: str = ""
    language: Language = "bash"
    env: dict[str, str] = {}
    """Added to the sandbox's allowlisted environment (nothing of the host's)."""
    cwd: str = ""
    """Working directory, relative to /workspace (or an absolute path under it)."""
    memory_bytes: Annotated[int, Meta(ge=32 * MiB)] | None = None
    """Memory of the process tree (cgroup, else RLIMIT_DATA); default the profile's limit."""
    output_bytes: Annotated[int, Meta(ge=4096, le=MAX_RING_BYTES)] = DEFAULT_RING_BYTES
    """Bytes kept per stream (a ring: the oldest are dropped, and counted, past it)."""
    stdin: bool = True
    """Keep a pipe to the process's stdin open for POST .../stdin (false: /dev/null)."""
    pty: bool = False
    """Run on a pseudo-terminal (stdout and stderr are then one stream, `stdout`)."""
    cols: Annotated[int, Meta(ge=1, le=1000)] = 80
    rows: Annotated[int, Meta(ge=1, le=1000)] = 24
    name: Annotated[str, Meta(max_length=200)] = ""
    """A label of the caller's, shown in listings."""


class ProcessInfo(msgspec.Struct, omit_defaults=True, kw_only=True):
    id: str
    """The id in the API's paths (`p1`, `p2`, …; never reused within a session)."""
    state: ProcessState
    argv: list[str]
    name: str = ""
    pid: int | None = None
    """The process's pid inside its sandbox (its own PID namespace)."""
    pty: bool = False
    started_at: float
    """Unix time."""
    ended_at: float | None = None
    exit_code: int | None = None
    """128 + N when ended by signal N."""
    signal: str | None = None
    """The signal that ended it, when one did."""
    error: str | None = None
    """Why it failed to start, or what stopped it (session ended, disk quota, memory)."""
    stdout_bytes: int = 0
    """Bytes written so far (the next offset), dropped ones included."""
    stderr_bytes: int = 0
    stdout_dropped: int = 0
    """Bytes of stdout no longer kept (the ring's oldest)."""
    stderr_dropped: int = 0
    ports: list[int] = []
    """TCP ports it listens on inside its sandbox (reachable through /ports/{port}/)."""
    memory_bytes: int = 0
    enforcement: str = ""


class ProcessList(msgspec.Struct, kw_only=True):
    processes: list[ProcessInfo]
    live: int
    max_live: int


class ProcessOutput(msgspec.Struct, kw_only=True):
    """Bytes of one stream from `offset` (a byte offset counted since the process started)."""

    stream: StreamName
    offset: int
    """Where `data` starts: the asked offset, or the oldest kept byte when that was dropped."""
    next_offset: int
    """Ask from here next time (reconnects resume without loss or repeat)."""
    data: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    dropped: int = 0
    """Bytes between the asked offset and `offset` that the ring no longer holds."""
    state: ProcessState = "running"
    exit_code: int | None = None


class ProcessExit(msgspec.Struct, kw_only=True):
    """The last event of an output stream (SSE `exit`): how the process ended."""

    state: ProcessState
    exit_code: int | None = None
    error: str | None = None


class ProcessOutputQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    stream: StreamName = "stdout"
    offset: Annotated[int, Meta(ge=0)] = 0
    limit: Annotated[int, Meta(ge=1, le=MAX_RING_BYTES)] = 256 * 1024
    encoding: Literal["utf-8", "base64"] = "utf-8"
    wait_s: Annotated[float, Meta(ge=0, le=60)] = 0.0
    """Wait up to this long for bytes past `offset` when there are none yet (long poll)."""


class ProcessStdin(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    data: str = ""
    encoding: Literal["utf-8", "base64"] = "utf-8"
    eof: bool = False
    """Close the process's stdin after writing."""


class ProcessStdinResult(msgspec.Struct, kw_only=True):
    written: int


class ProcessSignal(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    signal: SignalName = "TERM"
    tree: bool = False
    """Signal every process of its sandbox, not only the main one."""


class PreviewLinkBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    expires_in: Annotated[float, Meta(gt=0)] | None = None
    """Seconds; default and maximum as for GET file links."""


class PreviewLink(msgspec.Struct, kw_only=True):
    url: str
    """The preview's root on an origin of its own (never the API's): open it in a browser, no key needed."""
    port: int
    expires_at: float
    expires_in: float
    listening: bool = True
    """Whether a process of the session listens on the port now. A link is given out either way (a
    server about to start keeps it), but until something listens the preview answers 502
    `port_not_listening`; `hint` says what to do."""
    hint: str | None = None


class TerminalLink(msgspec.Struct, kw_only=True):
    """A short-lived link that opens a session's terminal WebSocket without a key (a browser cannot
    send one on a WebSocket); the socket stays open past the link's expiry."""

    url: str
    """The terminal WebSocket's absolute ws(s):// URL (see `[server] public_url`); add the terminal's
    query (cols, rows, command, …)."""
    expires_at: float
    expires_in: float


class TerminalQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The query of GET /v1/sessions/{id}/pty, the terminal WebSocket."""

    cols: Annotated[int, Meta(ge=1, le=1000)] = 80
    rows: Annotated[int, Meta(ge=1, le=1000)] = 24
    command: list[str] = []
    """The program to run on the terminal, one `command=` per argument (default: `bash -l`)."""
    keep: bool = False
    """Keep it running when the socket closes (reattach with `process=`); else it ends after a grace period."""
    process: str | None = None
    """Reattach to this terminal (kept, or still in its grace period) instead of starting one."""
    offset: Annotated[int, Meta(ge=0)] = 0
    """With `process`: replay its output from this byte offset (as far back as its ring still holds)."""


class PtyControl(msgspec.Struct, tag_field="type", forbid_unknown_fields=True):
    """A text frame on the terminal WebSocket (binary frames carry terminal bytes)."""


class PtyResize(PtyControl, tag="resize"):
    cols: Annotated[int, Meta(ge=1, le=1000)]
    rows: Annotated[int, Meta(ge=1, le=1000)]


class PtySignal(PtyControl, tag="signal"):
    signal: SignalName = "INT"


class PtyInput(PtyControl, tag="input"):
    """Text input as a text frame, for clients that cannot send binary frames."""

    data: str
