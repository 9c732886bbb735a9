"""The wire shapes of code mode: a tool a guest may call, and one call's record in a result."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["ToolCall", "ToolOutcome", "ToolSpec"]

ToolOutcome = Literal["ok", "tool_error", "not_allowed", "invalid_arguments", "budget", "timeout", "too_large",
                      "cancelled"]
"""How a guest's tool call ended: answered (`ok`), the tool raised (`tool_error`), or the host refused it."""


class ToolSpec(msgspec.Struct, kw_only=True):
    """A tool as guest code and a model see it: its name, what it does, its arguments' JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})
    """A JSON schema of type object: the tool's keyword arguments."""
    returns: dict[str, Any] | None = None
    """A JSON schema of its result, when known (stubs show it; results are not checked against it)."""


class ToolCall(msgspec.Struct, kw_only=True):
    """One call a guest made to a tool during a run, as the host decided and timed it."""

    tool: str
    outcome: ToolOutcome
    duration_ms: float = 0.0
    """The tool's own time (0 for a call refused before it ran)."""
    arguments_sha256: str = ""
    """Digest of the arguments as the guest sent them (JSON): a record that holds no argument values."""
    error: str | None = None
    """The message the guest got, when the call did not succeed."""
