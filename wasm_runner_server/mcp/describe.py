"""An execution's result as the text a model reads."""

from __future__ import annotations

from collections.abc import Sequence

from wasm_runner import ExecResult
from wasm_runner_protocol.execution import LIMIT_MESSAGES


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
