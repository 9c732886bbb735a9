"""The API a model is shown: a Python module and a TypeScript declaration made from tools' specs.

Both are text: the Python stub has one function per tool (signature and docstring, body `...`),
the `.d.ts` declares the global `tools` object with one async method per tool (camelCase), so
a TypeScript program type-checks against it.
"""

from __future__ import annotations

import json
import keyword
from collections.abc import Iterable
from typing import Any

from wasm_runner.tools.registry import camel_name
from wasm_runner_protocol.tools import ToolSpec

__all__ = ["python_stubs", "typescript_stubs"]

_PY_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_TS_SCALARS = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found: dict[str, Any] = defs.get(ref.rsplit("/", 1)[1], {})  # a JSON Schema definition
        return found
    return schema


def _py_type(schema: Any, defs: dict[str, Any], depth: int = 0) -> str:
    if not isinstance(schema, dict) or depth > 8:
        return "Any"
    schema = _resolve(schema, defs)
    if "enum" in schema:
        return "Literal[" + ", ".join(json.dumps(v) if v is not None else "None" for v in schema["enum"]) + "]"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(dict.fromkeys(_py_type(s, defs, depth + 1) for s in schema[key]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_py_type({**schema, "type": k}, defs, depth + 1) for k in kind)
    if kind in _PY_SCALARS:
        return _PY_SCALARS[kind]
    if kind == "array":
        return f"list[{_py_type(schema.get('items', {}), defs, depth + 1)}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"dict[str, {_py_type(extra, defs, depth + 1) if isinstance(extra, dict) else 'Any'}]"
    return "Any"


def _ts_type(schema: Any, defs: dict[str, Any], depth: int = 0) -> str:
    if not isinstance(schema, dict) or depth > 8:
        return "unknown"
    schema = _resolve(schema, defs)
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(dict.fromkeys(_ts_type(s, defs, depth + 1) for s in schema[key]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": k}, defs, depth + 1) for k in kind)
    if kind in _TS_SCALARS:
        return _TS_SCALARS[kind]
    if kind == "array":
        inner = _ts_type(schema.get("items", {}), defs, depth + 1)
        return f"Array<{inner}>"
    if kind == "object":
        properties = schema.get("properties")
        if isinstance(properties, dict) and properties:
            required = set(schema.get("required") or ())
            fields = "; ".join(f"{json.dumps(k) if not k.isidentifier() else k}{'' if k in required else '?'}: "
                               f"{_ts_type(v, defs, depth + 1)}" for k, v in properties.items())
            return "{ " + fields + " }"
        extra = schema.get("additionalProperties")
        return f"Record<string, {_ts_type(extra, defs, depth + 1) if isinstance(extra, dict) else 'unknown'}>"
    return "unknown"


def _docstring(text: str, indent: str) -> str:
    body = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = body.splitlines() or [""]
    return indent + '"""' + ("\n" + indent).join(lines) + '"""\n'


def python_stubs(specs: Iterable[ToolSpec]) -> str:
    """A Python module: `from sandbox import tools` then `tools.<name>(...)` with these signatures."""
    out = ['"""Tools this program may call: `from sandbox import tools, ToolError`, then `tools.<name>(...)`.',
           "", "A refused or failed call raises ToolError with the reason.", '"""', "",
           "from typing import Any, Literal", "", ""]
    for spec in specs:
        parameters = spec.parameters
        defs = parameters.get("$defs", {})
        required = set(parameters.get("required") or ())
        params: list[str] = []
        documented: list[str] = []
        for name, schema in (parameters.get("properties") or {}).items():
            if not name.isidentifier() or keyword.iskeyword(name):
                continue
            text = f"{name}: {_py_type(schema, defs)}"
            if name not in required:
                default = schema.get("default") if isinstance(schema, dict) else None
                text += " = " + (repr(default) if isinstance(default, (str, int, float, bool)) else "None")
            (params if name in required else documented).append(text)
            if isinstance(schema, dict) and schema.get("description"):
                pass
        ordered = [p for p in params] + documented
        returns = _py_type(spec.returns, spec.returns.get("$defs", {}) if spec.returns else {}) if spec.returns else "Any"
        out.append(f"def {spec.name}({', '.join(['*'] + ordered) if ordered else ''}) -> {returns}:")
        doc = spec.description or spec.name
        args = [(n, s.get("description")) for n, s in (parameters.get("properties") or {}).items()
                if isinstance(s, dict) and s.get("description")]
        if args:
            doc += "\n\nArgs:\n" + "\n".join(f"    {n}: {d}" for n, d in args)
        out.append(_docstring(doc, "    ") + "    ...")
        out.append("")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def typescript_stubs(specs: Iterable[ToolSpec]) -> str:
    """A `.d.ts`: the global `tools` object (one async method per tool, camelCase) and `ToolError`."""
    out = ["/** Tools this program may call: `await tools.<name>({...})`. A refused or failed call throws ToolError. */",
           "declare class ToolError extends Error {", "  readonly kind: string;", "}", "declare const tools: {"]
    for spec in specs:
        parameters = spec.parameters
        defs = parameters.get("$defs", {})
        argument = _ts_type(parameters, defs)
        optional = "" if parameters.get("required") else "?"
        returns = _ts_type(spec.returns, spec.returns.get("$defs", {})) if spec.returns else "unknown"
        doc = (spec.description or spec.name).replace("*/", "*\\/")
        out.append("  /** " + doc.replace("\n", "\n   * ") + " */")
        argument_text = "args" + optional + ": " + (argument if argument != "Record<string, unknown>" else "{}")
        out.append(f"  {camel_name(spec.name)}({argument_text}): Promise<{returns}>;")
    out.append("};")
    return "\n".join(out) + "\n"
