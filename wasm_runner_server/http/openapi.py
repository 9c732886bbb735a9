"""OpenAPI 3.1 for the service, generated from the msgspec Structs the handlers use.

Each handler carries an `Operation` (attached by `@operation(...)`) naming its body,
query and response Structs; `build_document` walks the application's routes and
turns those into paths, and `msgspec.json.schema_components` turns the Structs
into components. Nothing is written twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from wasm_runner_protocol.wire import SESSION_ID_PATTERN, ErrorResponse, ecma_patterns

REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Operation:
    summary: str
    tag: str
    body: Any = None
    """A msgspec type for a JSON body, or a media type string for raw bodies."""
    body_required: bool = True
    query: type[msgspec.Struct] | None = None
    response: Any = None
    """A msgspec type for a JSON response, a media type string for raw responses, or None for no body."""
    status: int = 200
    also: tuple[int, ...] = ()
    """Other success statuses with the same body (e.g. 200 beside 201)."""
    stream: bool = False
    """Also answers text/event-stream (stdout/stderr events, then the result)."""
    also_media: tuple[str, ...] = ()
    """Other media types the success may have, as text (e.g. text/csv for `?format=csv`)."""
    errors: tuple[int, ...] = ()
    description: str = ""
    error_body: Any = None
    """A msgspec type for the error responses, where they are not the service's shape (OAuth's RFC 6749 5.2)."""
    permission: str | None = None
    """The permission the route needs (a name of security.permissions.TREE), checked by the security
    policy before the handler runs; shown in the document as `x-permission`."""
    own: str | None = None
    """A lesser permission with which a caller lacking `permission` acts on their own records only."""


def operation(**kwargs: Any) -> Callable:
    spec = Operation(**kwargs)

    def attach(handler: Callable) -> Callable:
        handler.__openapi__ = spec  # type: ignore[attr-defined]
        return handler

    return attach


ANY_METHOD = ("get", "post", "put", "patch", "delete", "options")
"""The methods listed for a route that takes any (the preview proxy passes each on)."""


def _path_params(path: str) -> list[dict]:
    params = []
    for name in re.findall(r"\{(\w+)", path):  # also `{path}:presign` and `{port:\d+}`
        schema: dict = {"type": "string"}
        description = "a path inside the workspace"
        if name == "id":
            schema, description = {"type": "string", "pattern": SESSION_ID_PATTERN}, "session id"
        elif name == "port":
            schema, description = {"type": "integer", "minimum": 1, "maximum": 65535}, "a TCP port in the sandbox"
        elif name == "pid":
            description = "a process id of the session (p1, p2, …)"
        elif name == "path" and "/ports/" in path:
            description = "the path on the server in the sandbox"
        params.append({"name": name, "in": "path", "required": True, "schema": schema, "description": description})
    return params


def _query_params(struct: type[msgspec.Struct], components: dict) -> list[dict]:
    params = []
    for field in msgspec.structs.fields(struct):
        (schema,), extra = msgspec.json.schema_components([field.type], ref_template=REF)
        components.update(extra)
        param = {"name": field.encode_name, "in": "query", "required": field.required, "schema": schema}
        params.append(param)
    return params


_ERROR_TEXT = {400: "Bad request", 402: "A budget of the workspace is spent", 403: "Not allowed", 404: "Not found",
               409: "Conflict",
               413: "Too large", 415: "Unsupported media type", 416: "Range not satisfiable",
               422: "Invalid request", 429: "Overloaded (see Retry-After)", 501: "Not available on this server",
               503: "Shutting down or not ready"}


def _structs(types: list[Any]) -> dict[type, msgspec.inspect.StructType]:
    """Every struct reachable from `types`, by class."""
    found: dict[type, msgspec.inspect.StructType] = {}
    seen: set[int] = set()

    def walk(info: Any) -> None:
        if id(info) in seen:
            return
        seen.add(id(info))
        if isinstance(info, msgspec.inspect.StructType):
            found[info.cls] = info
            for field in info.fields:
                walk(field.type)
        for name in info.__struct_fields__:  # inspect's types are structs: their parts are fields
            value = getattr(info, name)
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, msgspec.inspect.Type):
                    walk(item)

    for info in msgspec.inspect.multi_type_info(types):
        walk(info)
    return found


def _omits_defaults(cls: type) -> bool:
    config = getattr(cls, "__struct_config__", None)
    return bool(getattr(config, "omit_defaults", False))


def _always_sent(responses: list[Any], requests: list[Any]) -> dict[str, list[str]]:
    """The fields each response-only struct always carries, by component name: all of them, since
    the service encodes defaults too, unless the struct omits its defaults or a field may be UNSET.
    A struct a request also uses keeps its optional fields (a client may leave them out)."""
    read = set(_structs(requests))
    always: dict[str, list[str]] = {}
    for cls, info in _structs(responses).items():
        if cls in read or _omits_defaults(cls):
            continue
        always[cls.__name__] = [f.encode_name for f in info.fields if f.default is not msgspec.UNSET]
    return always


def build_document(app: web.Application, *, title: str, version: str) -> dict:
    operations: list[tuple[str, str, Operation]] = []
    for route in app.router.routes():
        spec = getattr(route.handler, "__openapi__", None)
        if spec is None or route.method == "HEAD" or route.resource is None:
            continue
        methods = ANY_METHOD if route.method == "*" else (route.method.lower(),)
        operations.extend((route.resource.canonical, method, spec) for method in methods)

    types: list[Any] = [ErrorResponse]
    for _, _, spec in operations:
        for t in (spec.body, spec.response, spec.error_body):
            if t is not None and not isinstance(t, str):
                types.append(t)
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    requests = [t for _, _, spec in operations for t in (spec.body, spec.query) if t is not None and not isinstance(t, str)]
    for name, fields in _always_sent([t for _, _, spec in operations if (t := spec.response) is not None
                                      and not isinstance(t, str)], requests).items():
        if name in components:
            components[name]["required"] = sorted(set(components[name].get("required", ())) | set(fields))
    refs = {id(t): s for t, s in zip(types, schemas, strict=True)}
    error_ref = refs[id(ErrorResponse)]

    paths: dict[str, dict] = {}
    for path, method, spec in sorted(operations, key=lambda o: (o[0], o[1])):
        op: dict[str, Any] = {"summary": spec.summary, "tags": [spec.tag],
                              "operationId": f"{method}_{path.strip('/').replace('/', '_').replace('{', '').replace('}', '')}"}
        if spec.description:
            op["description"] = spec.description
        if spec.permission is not None:
            op["x-permission"] = spec.permission
            if spec.own is not None:
                op["x-permission-own"] = spec.own
        params = _path_params(path)
        if spec.query is not None:
            params += _query_params(spec.query, components)
        if params:
            op["parameters"] = params
        if spec.body is not None:
            if isinstance(spec.body, str):
                if spec.body == "multipart/form-data":
                    content = {spec.body: {"schema": {"type": "object", "additionalProperties": {
                        "type": "string", "format": "binary"}}}}
                else:
                    content = {spec.body: {"schema": {"type": "string", "format": "binary"}}}
            else:
                content = {"application/json": {"schema": refs[id(spec.body)]}}
            op["requestBody"] = {"required": spec.body_required, "content": content}
        responses: dict[str, Any] = {}
        ok: dict[str, Any] = {"description": "OK"}
        if spec.response is not None:
            if isinstance(spec.response, str):
                ok["content"] = {spec.response: {"schema": {"type": "string", "format": "binary"}
                                                 if "json" not in spec.response and not spec.response.startswith("text/")
                                                 else {"type": "string"}}}
            else:
                ok["content"] = {"application/json": {"schema": refs[id(spec.response)]}}
            for media in spec.also_media:
                ok["content"][media] = {"schema": {"type": "string"}}
            if spec.stream:
                ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
                ok["description"] = ("OK. With Accept: text/event-stream: `stdout`/`stderr` events "
                                     "({\"text\": ...}) as output happens, then one `result` event")
        responses[str(spec.status)] = ok
        for status in spec.also:
            responses[str(status)] = ok
        errors_ref = refs[id(spec.error_body)] if spec.error_body is not None else error_ref
        for status in sorted({400, 422, *spec.errors} if spec.body is not None or spec.query is not None
                             else set(spec.errors)):
            responses[str(status)] = {"description": _ERROR_TEXT.get(status, "Error"),
                                      "content": {"application/json": {"schema": errors_ref}}}
        responses["default"] = {"description": "Error", "content": {"application/json": {"schema": errors_ref}}}
        op["responses"] = responses
        paths.setdefault(path, {})[method] = op

    return ecma_patterns({
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "Run untrusted Python and JavaScript in WebAssembly: sessions, execution, files. "
                                "Every error has the shape {\"error\": {\"code\", \"message\", \"hint\"}}."},
        "paths": paths,
        "components": {"schemas": components},
    })
