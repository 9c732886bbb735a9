"""The MCP tools' side of background processes: their arguments (the HTTP wire's Structs plus the
process and session they name) and the text a model reads back."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from wasm_runner_protocol.processes import (
    PreviewLink,
    PreviewLinkBody,
    ProcessInfo,
    ProcessOutput,
    ProcessOutputQuery,
    ProcessStart,
    ProcessStdin,
)
from wasm_runner_protocol.wire import SessionId

SessionArg = Annotated[SessionId, Meta(description="Another session to act on; by default this connection's.")]
ProcessId = Annotated[str, Meta(pattern=r"^p[0-9]{1,12}$", description="The process's id, as start_process answered "
                                                                       "it (e.g. 'p1').")]
Port = Annotated[int, Meta(ge=1, le=65535, description="The TCP port the server listens on inside the sandbox.")]


class StartProcessArgs(ProcessStart, kw_only=True):
    """Start a background process in the session's sandbox (natively); it keeps running after the call."""

    session: SessionArg | None = None


class ProcessOutputArgs(ProcessOutputQuery, kw_only=True):
    """Read a background process's output from a byte offset."""

    process: ProcessId
    session: SessionArg | None = None


class SendInputArgs(ProcessStdin, kw_only=True):
    """Write to a background process's stdin."""

    process: ProcessId
    session: SessionArg | None = None


class StopProcessArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Stop a background process and its whole tree."""

    process: ProcessId
    session: SessionArg | None = None


class PreviewUrlArgs(PreviewLinkBody, kw_only=True):
    """A link to a server listening on a port in the session's sandbox."""

    port: Port
    session: SessionArg | None = None


def describe_process(info: ProcessInfo, session_id: str) -> str:
    line = f"process {info.id} ({' '.join(info.argv)}) is {info.state}"
    if info.pid is not None:
        line += f", pid {info.pid} in its sandbox"
    if info.exit_code is not None:
        line += f", exit code {info.exit_code}" + (f" ({info.signal})" if info.signal else "")
    if info.error:
        line += f"; {info.error}"
    if info.ports:
        line += "; listening on " + ", ".join(str(p) for p in info.ports) + " (preview_url gives a link)"
    return line + f"; session {session_id}"


def describe_output(output: ProcessOutput, process_id: str) -> str:
    parts = []
    if output.dropped:
        parts.append(f"({output.dropped} older bytes are no longer kept)")
    parts.append(output.data if output.data else f"(no {output.stream} past offset {output.offset})")
    status = f"[{output.stream} {output.offset}..{output.next_offset}; process {process_id} is {output.state}"
    if output.exit_code is not None:
        status += f", exit code {output.exit_code}"
    status += (f"; read on with offset={output.next_offset}]" if output.state in ("starting", "running")
               else "]")
    parts.append(status)
    return "\n".join(parts)


def describe_link(link: PreviewLink) -> str:
    text = (f"preview of port {link.port}: {link.url} (opens in a browser without a key; expires in "
            f"{link.expires_in / 60:.0f} min).")
    if link.listening:
        return text
    return f"{text} NOT LISTENING YET: {link.hint or 'nothing listens on that port'}."
