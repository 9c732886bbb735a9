"""Tools: a `ToolSpec` (name, description, JSON schema of the arguments) and the callable the host runs.

A spec comes from a Python callable's type hints (`tool`, see `wasm_runner_protocol.tools.spec_of`)
or from someone else (`from_spec`: checked). A tool's arguments are keywords; positional arguments
a Python guest passes are bound to the schema's properties in order.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from wasm_runner_protocol.tools import ToolSpec, check_name, spec_of

__all__ = ["Tool", "ToolRegistry", "ToolsArg", "as_registry", "camel_name", "from_spec", "marked_for_approval",
           "needing_approval", "tool"]

def camel_name(name: str) -> str:
    """The JavaScript name of a tool: `search_issues` -> `searchIssues`."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True)
class Tool:
    """A callable the host runs on a guest's behalf, with the spec the guest and the model see."""

    spec: ToolSpec
    function: Callable[..., Any]
    start: Callable[..., concurrent.futures.Future[Any]] | None = None
    """For a tool whose work runs on an event loop of its own (an MCP server's client): starts a
    call there and returns its future, so a run waits for it without handing it to a thread first."""

    @property
    def name(self) -> str:
        return self.spec.name

    def validator(self) -> Any:
        """A checker of this tool's arguments (jsonschema-rs: about 0.3 µs a call, where the pure-Python
        `jsonschema` took 12). Offline: a `$ref` the schema does not hold is an error, never fetched."""
        import jsonschema_rs

        return jsonschema_rs.validator_for(self.spec.parameters, offline=True)


def tool(function: Callable[..., Any], *, name: str | None = None, description: str | None = None,
         approval: bool = False) -> Tool:
    """A tool made from a Python callable: its keyword parameters (with type hints) become the
    JSON schema of its arguments, its docstring the description. TypeError when it cannot be one.
    With `approval`, each call waits for the run's approver (`on_approval`) before the tool runs."""
    if isinstance(function, Tool):
        return needing_approval(function) if approval else function
    return Tool(spec_of(function, name=name, description=description, approval=approval), function)


def needing_approval(found: Tool) -> Tool:
    """The same tool, each of whose calls waits for an approval (an operator's marking of an MCP tool)."""
    if found.spec.approval:
        return found
    return dataclasses.replace(found, spec=msgspec.structs.replace(found.spec, approval=True))


def marked_for_approval(tools: Iterable[Tool], names: Iterable[str]) -> list[Tool]:
    """The tools, those `names` names marked as needing approval (an operator's list for a profile)."""
    marked = frozenset(names)
    return [needing_approval(found) if found.name in marked else found for found in tools]


def from_spec(spec: ToolSpec, function: Callable[..., Any], *, allow_patterns: bool = False) -> Tool:
    """A tool whose spec someone else wrote (a caller over HTTP, an MCP server): its name and its
    schema are checked (ValueError saying what is wrong). Schemas with `pattern`/`patternProperties`
    are refused unless `allow_patterns` (an operator's own source): the host would otherwise run a
    caller's regular expression on a guest's arguments."""
    check_name(spec.name)
    parameters = spec.parameters
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ValueError(f"the tool {spec.name!r}: its parameters schema must be of type object")
    if not allow_patterns and _mentions(parameters, ("pattern", "patternProperties")):
        raise ValueError(f"the tool {spec.name!r}: schemas with pattern or patternProperties are not accepted "
                         f"(check such strings in the tool itself)")
    import jsonschema_rs

    try:
        jsonschema_rs.meta.validate(parameters)
        found = Tool(spec, function)
        found.validator()  # a reference it cannot resolve offline fails now, not at the first call
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"the tool {spec.name!r}: its parameters are not a valid JSON schema: {first_line}") from None
    return found


def _mentions(schema: Any, keys: tuple[str, ...], depth: int = 0) -> bool:
    if depth > 64:
        return True  # deeper than any honest schema: refused as if it held one
    if isinstance(schema, dict):
        return any(k in schema for k in keys) or any(_mentions(v, keys, depth + 1) for v in schema.values())
    if isinstance(schema, list):
        return any(_mentions(v, keys, depth + 1) for v in schema)
    return False


class ToolRegistry:
    """Tools by name; a guest names a tool by its snake_case or camelCase name."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._aliases: dict[str, str] = {}
        for item in tools:
            self.add(item)

    def add(self, item: Tool | Callable[..., Any]) -> Tool:
        made = item if isinstance(item, Tool) else tool(item)
        if made.name in self._tools:
            raise ValueError(f"two tools are named {made.name!r}")
        self._tools[made.name] = made
        self._aliases[camel_name(made.name)] = made.name
        return made

    def get(self, name: str) -> Tool | None:
        """The tool a guest names, or None (an unknown name, whatever it holds)."""
        if not isinstance(name, str):
            return None
        found = self._tools.get(name)
        if found is None and name in self._aliases:
            found = self._tools[self._aliases[name]]
        return found

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def narrowed(self, allowed: Iterable[str] | None, *, who: str | None = None) -> ToolRegistry:
        """The tools `allowed` names (None: all). Levels only narrow (profile > session > call):
        with `who`, a name this registry lacks is a PermissionError (an attempt to widen), else
        it is ignored (an allowlist may name tools this run was not given)."""
        if allowed is None:
            return self
        wanted = {self._aliases.get(name, name) for name in allowed}
        unknown = sorted(wanted - set(self._tools))
        if unknown and who is not None:
            raise PermissionError(f"{who} names tools this run may not use: {', '.join(unknown)} "
                                  f"(it may: {', '.join(sorted(self._tools)) or 'none'})")
        return ToolRegistry(t for name, t in self._tools.items() if name in wanted)

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())


ToolsArg = typing.Union["ToolRegistry", Iterable[Tool | Callable[..., Any]], Mapping[str, Callable[..., Any]]]
"""Tools as a caller gives them: a registry, callables or `Tool`s, or callables by name."""


def as_registry(tools: ToolsArg) -> ToolRegistry:
    """Tools as a caller gives them: a registry, callables/`Tool`s, or callables by name."""
    if isinstance(tools, ToolRegistry):
        return tools
    if isinstance(tools, Mapping):
        return ToolRegistry(tool(fn, name=name) for name, fn in tools.items())
    return ToolRegistry(tools)
