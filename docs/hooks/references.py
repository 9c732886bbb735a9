"""The reference pages, generated from the code at every build (a MkDocs hook).

Each page is rendered by a function here from the objects the product runs on: the
configuration's pydantic models, the `ErrorCode` enum and the places that raise each code,
the `wasm-runner` argparse parser as its console composes it, and the service's OpenAPI
document built from its application object (no server is started). `on_files` adds them
to the site as generated files; tests/docs/ checks that they cover what the code has.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import inspect
import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (ROOT / "wasm_runner_server", ROOT / "wasm_runner", ROOT / "wasm-runner-client" / "wasm_runner_client")
GENERATED = "<!-- generated at build time by docs/hooks/references.py: edit the code, not this page -->\n\n"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


# -- configuration ----------------------------------------------------------------------------------------


def _class_sources(model: type) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Per class of `model`'s hierarchy: attribute docstrings and default expressions, from its source."""
    for cls in model.__mro__:
        if not cls.__module__.startswith(("wasm_runner", "wasm_runner_server")):
            continue
        source = textwrap.dedent(inspect.getsource(cls))
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        docs: dict[str, str] = {}
        defaults: dict[str, str] = {}
        statements = body.body
        for index, node in enumerate(statements):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = node.target.id
                if node.value is not None:
                    defaults[name] = ast.get_source_segment(source, node.value) or ""
                after = statements[index + 1] if index + 1 < len(statements) else None
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                    docs[name] = inspect.cleandoc(after.value.value)
        yield docs, defaults


def _field_sources(model: type) -> tuple[dict[str, str], dict[str, str]]:
    docs: dict[str, str] = {}
    defaults: dict[str, str] = {}
    for class_docs, class_defaults in reversed(list(_class_sources(model))):
        docs.update(class_docs)
        defaults.update(class_defaults)
    return docs, defaults


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is None:
        if annotation is type(None):
            return "null"
        return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))
    args = get_args(annotation)
    if str(origin) in ("typing.Annotated",) or getattr(origin, "__name__", "") == "Annotated":
        return _type_name(args[0])
    if str(origin) == "typing.Literal":
        return " \\| ".join(json.dumps(a) for a in args)
    if str(origin) in ("typing.Union", "<class 'types.UnionType'>") or getattr(origin, "__name__", "") == "UnionType":
        return " \\| ".join(_type_name(a) for a in args)
    name = getattr(origin, "__name__", str(origin))
    return f"{name}[{', '.join(_type_name(a) for a in args)}]"


def _constraints(field: Any) -> str:
    words = []
    metadata = list(field.metadata)
    for argument in get_args(field.annotation):  # an optional value's constraints sit on its Annotated member
        for item in getattr(argument, "__metadata__", ()):
            metadata += list(getattr(item, "metadata", [item]))  # a Field(...) there holds its constraints
    for item in metadata:
        for attribute, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"), ("min_length", "length ≥"),
                                ("pattern", "matches")):
            value = getattr(item, attribute, None)
            if value is not None:
                words.append(f"{sign} `{value}`")
    return ", ".join(words)


def _default(field: Any, expression: str | None) -> str:
    if expression is not None and ("os." in expression or "Path.home" in expression):
        return f"`{expression}` (computed at start)"  # machine-dependent: the rule, not this machine's value
    value = field.get_default(call_default_factory=True)
    if hasattr(value, "model_dump"):
        return "(a section)"
    if isinstance(value, Path):
        value = str(value)
    try:
        text = json.dumps(value)
    except TypeError:
        text = repr(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        text += f" ({value // (1024 * 1024)} MiB)"
    return f"`{text}`"


def config_keys(model: type | None = None, prefix: str = "") -> list[tuple[str, str, str, str, str]]:
    """Every key of the service's configuration: (dotted key, type, default, constraints, description)."""
    from pydantic import BaseModel

    from wasm_runner.profiles import Profile
    from wasm_runner_server.config import ServiceConfig

    model = model or ServiceConfig
    docs, defaults = _field_sources(model)
    rows: list[tuple[str, str, str, str, str]] = []
    sections: list[tuple[str, str, str, str, str]] = []  # after the section's own keys, so each heading is once
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        key = f"{prefix}{name}"
        annotation = field.annotation
        description = docs.get(name) or field.description or ""
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            own = inspect.cleandoc(annotation.__dict__.get("__doc__") or "")
            sections.append((key, "section", "", "", description or own.split("\n\n")[0]))
            sections += config_keys(annotation, f"{key}.")
            continue
        if get_origin(annotation) is dict and get_args(annotation)[1] is Profile:
            sections.append((key, "table of profiles", "built-ins", "", description))
            sections += config_keys(Profile, f"{key}.NAME.")
            continue
        rows.append((key, _type_name(annotation), _default(field, defaults.get(name)), _constraints(field), description))
    return rows + sections


def _list_item_models() -> list[tuple[str, type]]:
    from wasm_runner.profiles import CredentialConfig, MountConfig

    return [("profiles.NAME.mounts[]", MountConfig), ("profiles.NAME.network.credentials[]", CredentialConfig)]


def _config_example(docstring: str) -> str:
    """The example file of the config module's docstring (its indented block)."""
    example = inspect.cleandoc(docstring).split("may set any of:", 1)[1].split("`wasm-runner run")[0]
    return textwrap.dedent(example.strip("\n")).strip()


def config_page() -> str:
    from wasm_runner_server import config

    lines = ["# Configuration reference", "", GENERATED.strip(), "",
             "Every key of the service's config file (TOML or JSON: `wasm-runner serve --config FILE`), from the "
             "pydantic models that validate it (`wasm_runner_server.config`, `wasm_runner.profiles` and the settings "
             "modules). Unknown keys are errors. `wasm-runner run --config FILE` reads the same file's "
             "`default_profile`, `[limits.*]` and `[profiles.*]`. How to use it: [Operations](../guides/operations.md).",
             "", "```text", _config_example(config.__doc__ or ""), "```", ""]
    section: str | None = None
    header = ["", "| key | type | default | allowed | description |", "|---|---|---|---|---|"]
    table = False
    rows = config_keys() + [row for key, model in _list_item_models() for row in config_keys(model, f"{key}.")]
    for key, kind, default, constraints, description in rows:
        if kind == "section" or kind == "table of profiles":
            lines += ["", f"## `[{key}]`", ""] + ([_cell(description)] if description else [])
            section, table = key, False
            continue
        head, _, leaf = key.rpartition(".")
        if head != section:
            lines += ["", f"## `[{head}]`" if head else "## Top level"]
            section, table = head, False
        if not table:
            lines += header
            table = True
        lines.append(f"| `{leaf}` | {kind} | {default} | {constraints} | {_cell(description)} |")
    return "\n".join(lines) + "\n"


# -- error codes ------------------------------------------------------------------------------------------


def error_families() -> dict[str, str]:
    """Each `ErrorCode` member's family, from the section comments of the enum's source."""
    from wasm_runner_protocol.errors import ErrorCode

    source = inspect.getsource(ErrorCode)
    family = ""
    found: dict[str, str] = {}
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            family = stripped.strip("# -").strip()
        elif "=" in stripped and stripped.split("=")[0].strip().isupper():
            found[stripped.split("=")[0].strip()] = family
    return found


_CALLS = {  # called name -> (position of the code, position of the status or a fixed status, position of the hint)
    "ApiError": (1, 0, 3), "not_found": (0, 404, 2), "overloaded": (2, 429, None), "ProfileError": (0, 422, 2),
    "tool_error": (0, None, 2), "session_not_found": (None, 404, 1),
}


def _text(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) if isinstance(part, ast.Constant) else "…" for part in node.values)
    return None


def _member(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ErrorCode":
        return node.attr
    return None


def _argument(call: ast.Call, position: int | None, keyword: str) -> ast.AST | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


@functools.cache  # one read of the whole source tree per process
def error_sites() -> dict[str, dict[str, set[str]]]:
    """Per code name: the HTTP statuses, hints and modules of the places that raise it (read from the source)."""
    sites: dict[str, dict[str, set[str]]] = {}

    def add(member: str, status: int | None, hint: str | None, module: str) -> None:
        entry = sites.setdefault(member, {"status": set(), "hint": set(), "module": set()})
        if status is not None:
            entry["status"].add(str(status))
        if hint:
            entry["hint"].add(hint)
        entry["module"].add(module)

    file_status: dict[str, int] = {}
    default_hints: dict[str, str] = {}  # helpers whose `hint` has a default, used where a call gives none
    errors_tree = ast.parse((ROOT / "wasm_runner_server" / "errors.py").read_text())
    for node in ast.walk(errors_tree):
        if isinstance(node, ast.FunctionDef) and node.name in _CALLS:
            names = [a.arg for a in node.args.args]
            defaults = dict(zip(names[len(names) - len(node.args.defaults):], node.args.defaults, strict=True))
            hint = _text(defaults.get("hint"))
            if hint:
                default_hints[node.name] = hint
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Attribute) and isinstance(value, ast.Constant) and isinstance(value.value, int) \
                        and key.attr.endswith("Error"):
                    file_status[key.attr] = value.value
                elif isinstance(key, ast.Constant) and isinstance(key.value, int) and _member(value):
                    add(_member(value) or "", key.value, None, "wasm_runner_server.errors")  # aiohttp's HTTP errors

    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            if "_runtimes" in path.parts:
                continue
            module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):  # FileOpError subclasses: `code = ErrorCode.X`
                    for statement in node.body:
                        if not isinstance(statement, ast.Assign | ast.AnnAssign):
                            continue
                        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                        if any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                            member = _member(statement.value)
                            if member:
                                add(member, file_status.get(node.name), None, f"{module}.{node.name}")
                if not isinstance(node, ast.Call):
                    continue
                name = ast.unparse(node.func).rpartition(".")[2]
                if name not in _CALLS:
                    continue
                code_at, status_at, hint_at = _CALLS[name]
                member = "SESSION_NOT_FOUND" if name == "session_not_found" else _member(_argument(node, code_at, "code"))
                if member is None:
                    continue
                status: int | None = None
                if name == "ApiError":
                    given = _argument(node, 0, "status")
                    status = given.value if isinstance(given, ast.Constant) and isinstance(given.value, int) else None
                elif isinstance(status_at, int):
                    status = status_at
                given_hint = _argument(node, hint_at, "hint")
                hint = "retry after the number of seconds in Retry-After" if name == "overloaded" else \
                    _text(given_hint) if given_hint is not None else default_hints.get(name)
                add(member, status, hint, module)
    return sites


def errors_page() -> str:
    from wasm_runner_protocol.errors import ErrorCode

    families = error_families()
    sites = error_sites()
    lines = ["# Error codes", "", GENERATED.strip(), "",
             "Every error the service answers has the body `{\"error\": {\"code\", \"message\", \"hint\"}}`; MCP tool "
             "errors carry the same body as structured content, and the client raises `ApiError` subclasses with "
             "`.code`. The codes are `wasm_runner_protocol.errors.ErrorCode` (a `StrEnum`: a member equals its "
             "string). The statuses and hints below are read from the places in the code that raise each code; "
             "hints built at run time are shown with `…` for the parts filled in.", ""]
    family = None
    for member in ErrorCode:
        if families.get(member.name) != family:
            family = families.get(member.name)
            title = family or "other"
            lines += ["", f"## {title[0].upper()}{title[1:]}", "", "| code | HTTP | hint | raised in |",
                      "|---|---|---|---|"]
        entry = sites.get(member.name, {"status": set(), "hint": set(), "module": set()})
        status = ", ".join(sorted(entry["status"])) or "—"
        hints = "<br>".join(_cell(h) for h in sorted(entry["hint"])) or "—"
        where = ", ".join(f"`{m}`" for m in sorted(entry["module"])[:4])
        if len(entry["module"]) > 4:
            where += f" and {len(entry['module']) - 4} more"
        if member.__doc__ and member.__doc__ != ErrorCode.__doc__ and not where:
            where = _cell(member.__doc__)
        lines.append(f"| `{member.value}` | {status} | {hints} | {where or '—'} |")
    return "\n".join(lines) + "\n"


# -- command line -----------------------------------------------------------------------------------------


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def cli_parser() -> argparse.ArgumentParser:
    """The parser `wasm-runner` builds (its console's `main`, stopped where it would parse)."""
    from wasm_runner_server.cli import console

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> argparse.Namespace:
        raise _Parsed(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture):
        try:
            console.main(["--help"])
        except _Parsed as parsed:
            return parsed.parser
    raise RuntimeError("the console built no parser")


def subcommands(parser: argparse.ArgumentParser,
                path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command of `parser`, depth first, with its words."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from subcommands(child, (*path, name))


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def cli_page() -> str:
    lines = ["# Command line", "", GENERATED.strip(), "",
             "`wasm-runner` is installed with the package. Each command's help below is its argparse parser's own "
             "(`wasm-runner COMMAND --help` prints the same). Guides: [Quick start](../guides/quick-start.md), "
             "[Operations](../guides/operations.md).", ""]
    with _columns(110):
        for words, parser in subcommands(cli_parser()):
            title = " ".join(("wasm-runner", *words))
            lines += [f"## `{title}`" if words else "## `wasm-runner`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


# -- HTTP API ---------------------------------------------------------------------------------------------


def openapi_document() -> dict:
    """The service's OpenAPI document, built from its application object without starting it."""
    from wasm_runner_server.app import create_app
    from wasm_runner_server.http.openapi import build_document
    from wasm_runner_server.http.routes.meta import API_VERSION

    return build_document(create_app(), title="wasm-runner", version=API_VERSION)


def http_page(document: dict) -> str:
    lines = ["# HTTP API", "", GENERATED.strip(), "",
             f"Version {document['info']['version']} of the API; every route the service documents in `GET /openapi.json`, "
             "built from the same msgspec Structs as the library. The whole document: "
             "[openapi.json](openapi.json) (load it into any OpenAPI viewer or client generator). Errors: "
             "[error codes](errors.md). Authentication: `Authorization: Bearer wr_…` unless the path is public "
             "or the service runs with `--no-auth`.", ""]
    by_tag: dict[str, list[tuple[str, str, dict]]] = {}
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            by_tag.setdefault(operation.get("tags", ["other"])[0], []).append((path, method, operation))
    for tag in sorted(by_tag):
        lines += ["", f"## {tag}", "", "| method | path | summary | body | answer |", "|---|---|---|---|---|"]
        for path, method, operation in by_tag[tag]:
            body = ", ".join(operation.get("requestBody", {}).get("content", {})) or ""
            ok: Any = next(iter(operation.get("responses", {}).values()), {})
            answer = ", ".join(ok.get("content", {})) if isinstance(ok, dict) else ""
            summary = operation.get("summary", "")
            if operation.get("description"):
                summary += f" — {operation['description']}"
            lines.append(f"| {method.upper()} | `{path}` | {_cell(summary)} | {_cell(body)} | {_cell(answer)} |")
    return "\n".join(lines) + "\n"


# -- MCP tools --------------------------------------------------------------------------------------------


def mcp_tools() -> list[Any]:
    """The tools the MCP server lists (`wasm_runner_server.mcp.catalog.TOOLS`)."""
    from wasm_runner_server.mcp.catalog import TOOLS

    return list(TOOLS)


def mcp_page() -> str:
    import msgspec

    lines = ["# MCP tools", "", GENERATED.strip(), "",
             "The tools `wasm-runner mcp` (stdio) and `/mcp` on the service (streamable HTTP) list, in their order. "
             "Every tool takes an optional `session` naming another session of the caller's workspace. "
             "How to connect: [MCP](../guides/mcp.md).", "",
             "| tool | title | kind | arguments | description |", "|---|---|---|---|---|"]
    for tool in mcp_tools():
        kind = "read-only" if tool.read_only else "destructive" if tool.destructive else "—"
        arguments = ", ".join(f"`{field.encode_name}`" for field in msgspec.structs.fields(tool.args))
        lines.append(f"| `{tool.name}` | {_cell(tool.title)} | {kind} | {arguments} | {_cell(tool.described())} |")
    return "\n".join(lines) + "\n"


# -- the MkDocs hook --------------------------------------------------------------------------------------


def pages() -> dict[str, str]:
    """The generated files of the site, by path under docs/."""
    document = openapi_document()
    return {
        "reference/config.md": config_page(),
        "reference/errors.md": errors_page(),
        "reference/cli.md": cli_page(),
        "reference/http.md": http_page(document),
        "reference/mcp.md": mcp_page(),
        "reference/openapi.json": json.dumps(document, indent=1),
    }


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, content in pages().items():
        files.append(File.generated(config, path, content=content))
    return files
