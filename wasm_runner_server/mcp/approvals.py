"""Approvals over MCP: a call of a tool that needs approval, made by code run with `sandbox_execute_code`,
is put to the MCP client as an elicitation (form mode, one boolean), its answer posted as the decision.

A client that did not declare the `elicitation` capability cannot be asked: the call is refused with a
reason saying so. No answer within the call's `timeout_s`, a declined or cancelled form, or a failed
request are refusals too, each with its reason (the guest's ToolError carries it).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.session import ServerSession

from wasm_runner_protocol.tools import ApprovalDecision, ApprovalEvent

__all__ = ["APPROVAL_FORM", "NO_ELICITATION", "Ask", "asker", "question"]

Ask = Callable[[ApprovalEvent], Awaitable[ApprovalDecision]]
"""Puts one call waiting for approval to the MCP client; its decision."""

NO_ELICITATION = ("the MCP client cannot be asked (it did not declare the elicitation capability), so no one "
                  "can approve it: use a client that supports elicitation, or the HTTP API's event stream")
APPROVAL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve this call",
                               "description": "true lets the tool run; false refuses the call"}},
    "required": ["approve"],
}
MAX_SHOWN_ARGUMENTS = 2000
"""Characters of a call's arguments shown in the question (the rest elided)."""


def question(event: ApprovalEvent) -> str:
    """What the MCP client's user is asked."""
    shown = json.dumps(event.arguments, ensure_ascii=False, sort_keys=True)
    if len(shown) > MAX_SHOWN_ARGUMENTS:
        shown = shown[:MAX_SHOWN_ARGUMENTS] + f"... ({len(shown) - MAX_SHOWN_ARGUMENTS} more characters)"
    return (f"Code run with sandbox_execute_code calls the tool {event.tool}, which needs approval, with the "
            f"arguments {shown}. Approve this call? (It is refused without an answer within {event.timeout_s:g} s.)")


ASK_GRACE_S = 1.0
"""How much longer than the call's timeout the question to the client stays open: on a loaded machine
two waits of the same length end in either order, and the call's outcome must be the host's."""


def asker(session: ServerSession, request_id: types.RequestId | None) -> Ask | None:
    """How to ask the client of `session` (the call of `request_id` waits); None when it cannot be asked."""
    if not session.check_client_capability(types.ClientCapabilities(elicitation=types.ElicitationCapability())):
        return None

    async def ask(event: ApprovalEvent) -> ApprovalDecision:
        try:
            # the host's own wait decides a call nobody answered (`timeout`); this one ends after it
            with anyio.fail_after(max(event.timeout_s, 0.001) + ASK_GRACE_S):
                answer = await session.elicit_form(question(event), APPROVAL_FORM, related_request_id=request_id)
        except TimeoutError:
            return ApprovalDecision(approve=False, reason=f"the MCP client gave no answer within {event.timeout_s:g} s")
        except Exception as exc:  # noqa: BLE001 - any failure to ask is a refusal, with its reason
            return ApprovalDecision(approve=False, reason=f"the MCP client could not be asked: {type(exc).__name__}")
        if answer.action != "accept":
            return ApprovalDecision(approve=False, reason=f"the MCP client's user {answer.action}d it"
                                    if answer.action == "decline" else "the MCP client's user cancelled the question")
        if (answer.content or {}).get("approve") is not True:
            return ApprovalDecision(approve=False, reason="the MCP client's user did not approve it")
        return ApprovalDecision(approve=True)

    return ask
