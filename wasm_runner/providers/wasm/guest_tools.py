"""The host side of a guest's tool calls: the Python guest's WIT import `call-tool`, and the
JavaScript guest's messages on its host channel whose head's op is "tool".

The import is linked once per engine, for every instance; which run asks is told by the worker
thread running the call (`serve`, set around each execution by the provider), like
`guest_installs`. A run given no tools gets a refusal, whatever tool it names. The handler
(`wasm_runner.tools.ToolRun.handle`, or a worker's way to the parent's) answers JSON and must
never raise into the guest (an exception in a host function poisons the instance).
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections.abc import Callable
from typing import Any

IMPORT_NAME = "call-tool"
TOOL_HEAD = b'{"op":"tool"'
"""How a JavaScript guest's message on the host channel starts when it is a tool call (the driver's
JSON.stringify writes `op` first); any other message is an HTTP request."""
log = logging.getLogger("wasm_runner")

_current = threading.local()


def refusal(kind: str, message: str) -> str:
    return json.dumps({"ok": False, "error": {"kind": kind, "message": message}})


NO_TOOLS = refusal("not_allowed", "this run was given no tools (pass tools=[...] to run, or name them in the request)")


def serve(handler: Callable[[str], str] | None) -> Callable[[str], str] | None:
    """Calls on this thread answer the guest's tool calls with `handler` (None: refused);
    returns the handler it replaces, to put back when the execution ends."""
    previous = getattr(_current, "handler", None)
    _current.handler = handler
    return previous


def answer_with(handler: Callable[[str], str], request: str) -> str:
    """`handler`'s answer to the guest's call; a failure of the host's own is an answer too."""
    try:
        return handler(request)
    except Exception:  # noqa: BLE001 - the guest gets an answer, the instance stays usable
        log.exception("a guest's tool call failed on the host")
        return refusal("tool_error", "the host could not make the call")


def answer_text(request: str) -> str:
    handler: Callable[[str], str] | None = getattr(_current, "handler", None)
    if handler is None:
        return NO_TOOLS
    return answer_with(handler, request)


def answer(_store: Any, request: str) -> str:
    """The WIT import's host function."""
    return answer_text(request)


def is_tool_message(data: bytes) -> bool:
    """Whether a JavaScript guest's host-channel message (4-byte head length, JSON head) is a tool call."""
    return data[4:4 + len(TOOL_HEAD)] == TOOL_HEAD


def answer_binary(data: bytes) -> bytes:
    """A JavaScript guest's tool call, framed as its host channel frames messages (no body)."""
    if len(data) < 4:
        reply = refusal("invalid_arguments", "a malformed tool call")
    else:
        (length,) = struct.unpack_from("<I", data)
        try:
            head = data[4:4 + length].decode("utf-8")
        except UnicodeDecodeError:
            head = ""
        reply = answer_text(head) if head else refusal("invalid_arguments", "a malformed tool call")
    encoded = reply.encode("utf-8")
    return struct.pack("<I", len(encoded)) + encoded
