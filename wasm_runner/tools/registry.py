"""Tools from Python callables: a name, a description and a JSON schema made from type hints.

A tool's arguments are keywords; positional arguments a Python guest passes are bound to the
schema's properties in order. A model and guest code see `ToolSpec`s; the host keeps the callable.
"""

from __future__ import annotations

import inspect
import keyword
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from wasm_runner_protocol.tools import ToolSpec

__all__ = ["Tool", "ToolRegistry", "ToolsArg", "as_registry", "camel_name", "tool"]

NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
"""A tool's name: snake_case, which is a Python identifier and maps one-to-one to a JavaScript camelCase name."""


def camel_name(name: str) -> str:
    """The JavaScript name of a tool: `search_issues` -> `searchIssues`."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True)
class Tool:
    """A callable the host runs on a guest's behalf, with the spec the guest and the model see."""

    spec: ToolSpec
    function: Callable[..., Any]

    @property
    def name(self) -> str:
        return self.spec.name


def _schema(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    try:
        schema = msgspec.json.schema(annotation)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"no JSON schema for the type {annotation!r}: use JSON types (str, int, float, bool, "
                        f"list, dict, None, TypedDict, msgspec.Struct)") from exc
    return schema


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


def tool(function: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> Tool:
    """A tool made from a Python callable: its keyword parameters (with type hints) become the
    JSON schema of its arguments, its docstring the description. TypeError when it cannot be one."""
    if isinstance(function, Tool):
        return function
    name = name if name is not None else getattr(function, "__name__", "")
    if not NAME.match(name) or keyword.iskeyword(name) or name.endswith("_"):
        raise TypeError(f"a tool's name is snake_case (lower-case letters, digits, single underscores, "
                        f"at most 64 characters, not a Python keyword): {name!r}")
    if "__" in name:
        raise TypeError(f"a tool's name has no double underscore: {name!r}")
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
    spec = ToolSpec(name=name, description=description if description is not None else summary,
                    parameters=parameters, returns=returns)
    return Tool(spec, function)


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
