"""The wire shapes of code mode: a tool a guest may call, and one call's record in a result."""

from __future__ import annotations

import inspect
import keyword
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec

__all__ = ["ApprovalDecided", "ApprovalDecision", "ApprovalEvent", "ApprovalState", "RunStarted", "ToolAnswer", "ToolAnswered",
           "ToolCall", "ToolCallEvent", "ToolList", "ToolOutcome", "ToolSpec", "check_name",
           "spec_of"]

ToolOutcome = Literal["ok", "tool_error", "not_allowed", "invalid_arguments", "budget", "timeout", "too_large",
                      "cancelled", "refused"]
"""How a guest's tool call ended: answered (`ok`), the tool raised (`tool_error`), or the host refused it
(`refused`: its approval was denied)."""

ApprovalState = Literal["granted", "refused", "timeout"]
"""The decision on a call of a tool that needs approval: given, denied, or none before the call's timeout."""


class ToolSpec(msgspec.Struct, kw_only=True):
    """A tool as guest code and a model see it: its name, what it does, its arguments' JSON schema."""

    name: Annotated[str, msgspec.Meta(max_length=64)]
    description: Annotated[str, msgspec.Meta(max_length=16384)] = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})
    """A JSON schema of type object: the tool's keyword arguments."""
    returns: dict[str, Any] | None = None
    """A JSON schema of its result, when known (stubs show it; results are not checked against it)."""
    approval: bool = False
    """Each call waits for someone's approval (an `approval_required` event) before the tool runs."""


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
    approval: ApprovalState | None = None
    """For a tool that needs approval: the decision (None: no approval was asked)."""


class ToolCallEvent(msgspec.Struct, kw_only=True):
    """A guest's call of a caller-side tool, sent on the exec stream as the event `tool_call`: the
    caller runs the tool and posts a `ToolAnswer` to /v1/sessions/{id}/tool-calls/{call_id}."""

    call_id: str
    tool: str
    arguments: dict[str, Any] = {}
    """Checked against the tool's schema by the service."""


class RunStarted(msgspec.Struct, kw_only=True):
    """The first event of a one-shot run's stream that offers caller-side tools or may ask approvals
    (`run`): the run's id, under which its calls are answered (POST /v1/exec/{run_id}/tool-calls/{call_id},
    POST /v1/exec/{run_id}/approvals/{approval_id}) by a key of the caller's workspace, while it runs."""

    run_id: str


class ApprovalEvent(msgspec.Struct, kw_only=True):
    """A guest's call of a tool that needs approval, sent on the exec stream as the event
    `approval_required`: the call waits for a `ApprovalDecision` posted to
    /v1/sessions/{id}/approvals/{approval_id}, until the call's timeout (then it is refused)."""

    approval_id: str
    tool: str
    arguments: dict[str, Any] = {}
    """Already checked against the tool's schema."""
    timeout_s: float = 0.0
    """How long the call waits for the decision."""


class ApprovalDecision(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The decision on an `ApprovalEvent`: the tool runs, or the guest gets ToolError `refused`."""

    approve: bool
    reason: Annotated[str, msgspec.Meta(max_length=1000)] = ""
    """Why a call is refused, when the one deciding says: the guest's ToolError carries it."""


class ApprovalDecided(msgspec.Struct, kw_only=True):
    """The service took the decision: the waiting call goes on (or is refused) now."""

    accepted: bool = True


class ToolAnswer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The caller's answer to a `ToolCallEvent`: the tool's JSON result, or the error it raised."""

    ok: bool = True
    value: Any = None
    error: Annotated[str, msgspec.Meta(max_length=16384)] | None = None
    """With ok false: the message the guest's ToolError carries."""


class ToolList(msgspec.Struct, kw_only=True):
    """The tools a session's runs get from its profile (its MCP servers), and the API a model is shown:
    a Python stub module and a TypeScript declaration of the `tools` object."""

    tools: list[ToolSpec] = []
    python: str = ""
    typescript: str = ""


class ToolAnswered(msgspec.Struct, kw_only=True):
    """The service took the caller's answer to a tool call: the guest gets it now."""

    accepted: bool = True


# -- specs from Python callables (the library's tools and the typed client's alike) -----------------

NAME = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
"""A tool's name: snake_case, which is a Python identifier and maps one-to-one to a JavaScript camelCase name."""
MAX_NAME = 64


def check_name(name: object) -> str:
    """`name` when it can name a tool; else ValueError saying what a name is."""
    if not isinstance(name, str) or not NAME.match(name) or len(name) > MAX_NAME or keyword.iskeyword(name):
        raise ValueError(f"a tool's name is snake_case (lower-case letters and digits in words joined by single "
                         f"underscores, at most {MAX_NAME} characters, not a Python keyword): {name!r}")
    return name


def _schema(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    try:
        return msgspec.json.schema(annotation)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"no JSON schema for the type {annotation!r}: use JSON types (str, int, float, bool, "
                        f"list, dict, None, TypedDict, msgspec.Struct)") from exc


def _describe(doc: str) -> tuple[str, dict[str, str]]:
    """The summary of a docstring and its `Args:` descriptions (Google style), if any."""
    text = inspect.cleandoc(doc or "")
    summary, _, rest = text.partition("\nArgs:")
    described: dict[str, str] = {}
    current = None
    for line in rest.splitlines():
        match = re.match(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if match:
            current = match.group(1)
            described[current] = match.group(2).strip()
        elif current is not None and line.startswith(" " * 6) and line.strip():
            described[current] += " " + line.strip()
        elif line.strip() and not line.startswith(" "):
            break  # Returns:, Raises: ...
    return summary.strip(), described


def spec_of(function: Callable[..., Any], *, name: str | None = None, description: str | None = None,
            approval: bool = False) -> ToolSpec:
    """The spec of a Python callable: its keyword parameters (with type hints) become the JSON schema
    of its arguments, its docstring the description. TypeError when it cannot be a tool."""
    name = name if name is not None else getattr(function, "__name__", "")
    try:
        check_name(name)
    except ValueError as exc:
        raise TypeError(str(exc)) from None
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - unresolvable hints: the annotations as written
        hints = {}
    summary, described = _describe(inspect.getdoc(function) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"the tool {name!r} has a positional-only parameter {parameter.name!r}: "
                            f"tools take keyword arguments")
        schema = dict(_schema(hints.get(parameter.name, parameter.annotation)))
        defs.update(schema.pop("$defs", {}))
        if parameter.name in described:
            schema["description"] = described[parameter.name]
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        else:
            try:
                schema["default"] = msgspec.to_builtins(parameter.default)
            except TypeError:
                pass  # a default JSON cannot show: the function applies it
        properties[parameter.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        parameters["required"] = required
    if defs:
        parameters["$defs"] = defs
    returns_hint = hints.get("return", signature.return_annotation)
    returns: dict[str, Any] | None = None
    if returns_hint is not inspect.Parameter.empty and returns_hint is not Any:
        try:
            returns = _schema(returns_hint)
        except TypeError:
            returns = None
    return ToolSpec(name=name, description=description if description is not None else summary,
                    parameters=parameters, returns=returns, approval=approval)
