"""Approvals: calls of tools that need approval, waiting for the session's owner to decide.

The run's approver (`wasm_runner.tools.ToolRun` asks it once a call has passed the allowlist, the
budget and the schema) sends an `approval_required` event on the run's exec stream with a fresh
approval id, and waits for `POST /v1/sessions/{id}/approvals/{approval_id}` `{"approve": bool}`.
The ToolRun bounds the wait by the call's timeout and the run's end: a decision after that is a 404.
An id is decided once, and only through the session whose run asked.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from wasm_runner.tools import ApprovalRefused, ApprovalRequest
from wasm_runner_protocol.tools import ApprovalEvent

__all__ = ["Approvals"]

Emit = Callable[[str, bytes], None]
"""Sends one event on the run's stream (name, JSON data); called on the event loop."""


@dataclass
class _Pending:
    session: str
    future: asyncio.Future[bool]


class Approvals:
    """The tool calls waiting for a decision, service-wide."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def approver(self, session_id: str, emit: Emit) -> Callable[[ApprovalRequest], Awaitable[bool]]:
        """The approver of one run of the session, its questions sent with `emit`."""

        async def ask(request: ApprovalRequest) -> bool:
            approval_id = secrets.token_hex(16)
            future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._pending[approval_id] = _Pending(session_id, future)
            try:
                emit("approval_required", msgspec.json.encode(ApprovalEvent(
                    approval_id=approval_id, tool=request.tool, arguments=request.arguments,
                    timeout_s=request.timeout_s)))
                return await future
            finally:
                self._pending.pop(approval_id, None)

        return ask

    def decide(self, session_id: str, approval_id: str, approve: bool, reason: str = "") -> bool:
        """Give a waiting call its decision (on the loop), a refusal with its `reason` if one is given; False when
        no call of that session waits under that id."""
        pending = self._pending.get(approval_id)
        if pending is None or pending.session != session_id or pending.future.done():
            return False
        if not approve and reason:
            pending.future.set_exception(ApprovalRefused(reason))
        else:
            pending.future.set_result(approve)
        return True

    @property
    def waiting(self) -> int:
        return len(self._pending)
