"""Caller-side tools: tools that run in the caller's process, reached through the exec stream.

An exec request names its tools with their specs; each guest call the host allows (allowlist,
budget, schema: `wasm_runner.tools.ToolRun`) is sent on the stream as a `tool_call` event with a
fresh call id, and waits for the caller's `POST /v1/sessions/{id}/tool-calls/{call_id}`. The wait
ends with the call's timeout or the run (the ToolRun cancels it): a late answer is a 404. A call id
is answered once, and only for the session whose run made it.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from wasm_runner.tools import Tool, from_spec
from wasm_runner_protocol.tools import ToolAnswer, ToolCallEvent, ToolSpec

__all__ = ["CallerToolError", "CallerTools"]

Emit = Callable[[str, bytes], None]
"""Sends one event on the run's stream (name, JSON data); called on the event loop."""


class CallerToolError(Exception):
    """The caller answered that its tool failed: the guest's ToolError carries this message."""


@dataclass
class _Pending:
    session: str
    future: asyncio.Future[ToolAnswer]


class CallerTools:
    """The caller-side tool calls waiting for their answers, service-wide."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def tools(self, session_id: str, specs: list[ToolSpec], emit: Emit) -> list[Tool]:
        """Tools whose calls go to the caller through `emit` (ValueError for a bad spec)."""
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError("two tools have one name")
        # bound positionally: no argument a guest names can replace the session, the tool or the stream
        return [from_spec(spec, functools.partial(self._call, session_id, spec.name, emit)) for spec in specs]

    async def _call(self, session_id: str, name: str, emit: Emit, /, **arguments: Any) -> Any:
        call_id = secrets.token_hex(16)
        future: asyncio.Future[ToolAnswer] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = _Pending(session_id, future)
        try:
            emit("tool_call", msgspec.json.encode(ToolCallEvent(call_id=call_id, tool=name, arguments=arguments)))
            answer = await future
        finally:
            self._pending.pop(call_id, None)
        if not answer.ok:
            raise CallerToolError(answer.error or "the caller's tool failed")
        return answer.value

    def answer(self, session_id: str, call_id: str, answer: ToolAnswer) -> bool:
        """Give a waiting call its answer (on the loop); False when no call of that session waits under that id."""
        pending = self._pending.get(call_id)
        if pending is None or pending.session != session_id or pending.future.done():
            return False
        pending.future.set_result(answer)
        return True

    @property
    def waiting(self) -> int:
        return len(self._pending)
