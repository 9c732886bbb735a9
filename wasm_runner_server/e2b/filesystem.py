"""envd's file transfer (`/files`) and its Connect-RPC Filesystem service, on a session's files.

Reads and writes stream through the API's file routes. Listing and stat come from the API's
listings. Making a directory and moving are done by `mkdir -p` and `mv -T` run in the sandbox
(the API's native process call, argv only, no shell): the file routes have neither.
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable
from email.message import Message
from email.utils import collapse_rfc2231_value
from typing import Any

from aiohttp import BodyPartReader, web

from wasm_runner_server.e2b.connect_rpc import SESSION_NOT_FOUND, RpcError, int_field, sandbox_not_found
from wasm_runner_server.e2b.paths import absolute, relative
from wasm_runner_server.e2b.sandbox import SandboxCall
from wasm_runner_server.e2b.upstream import UpstreamError, file_path, session_path

routes = web.RouteTableDef()

FILE_TYPES = {"file": "FILE_TYPE_FILE", "directory": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}
CHUNK = 64 * 1024


def envd_error(status: int, message: str) -> web.Response:
    """An error of envd's HTTP API: `{"code": <status>, "message": ...}`."""
    return web.json_response({"code": status, "message": message}, status=status)


def _http_error(error: UpstreamError) -> web.Response:
    if error.code == SESSION_NOT_FOUND:
        return envd_error(502, sandbox_not_found(error))  # as E2B's proxy: the SDK's SandboxNotRunningException
    if error.status == 413 or error.code in ("quota_exceeded", "file_too_large"):
        return envd_error(507, error.message)  # the SDK's NotEnoughSpaceException
    return envd_error(400 if error.status in (409, 415, 416, 422) else error.status, error.message)


def entry_of(entry: dict[str, Any]) -> dict[str, Any]:
    """envd's EntryInfo (protobuf JSON) for an entry of the API's listing."""
    rel = entry["path"]
    kind = entry["type"]
    mode = 0o755 if kind == "directory" else 0o644
    return {"name": posixpath.basename(rel) or "workspace", "type": FILE_TYPES.get(kind, "FILE_TYPE_UNSPECIFIED"),
            "path": absolute(rel), "size": str(entry.get("size", 0)),
            "mode": (0o040000 if kind == "directory" else 0o100000) | mode,
            "permissions": _permissions(kind, mode), "owner": "user", "group": "user",
            "modifiedTime": entry.get("mtime"), **({"isSymlink": True} if kind == "symlink" else {})}


def _permissions(kind: str, mode: int) -> str:
    bits = "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return ("d" if kind == "directory" else "-") + bits


async def _listing(call: SandboxCall, rel: str, recursive: bool = False) -> dict[str, Any]:
    params = {"path": rel, "recursive": "true" if recursive else "false", "limit": "10000"}
    listing: dict[str, Any] = await call.upstream.call("GET", session_path(call.sandbox_id, "files"), params=params)
    return listing


async def stat(call: SandboxCall, rel: str) -> dict[str, Any]:
    """The EntryInfo of one path; not_found when there is nothing there."""
    if not rel:
        return {"name": "workspace", "type": "FILE_TYPE_DIRECTORY", "path": absolute(""), "size": "0",
                "mode": 0o040755, "permissions": "drwxr-xr-x", "owner": "user", "group": "user"}
    try:
        listing = await _listing(call, posixpath.dirname(rel))
    except UpstreamError as exc:
        if exc.code != SESSION_NOT_FOUND and (exc.status == 404 or exc.code == "not_a_directory"):
            raise RpcError("not_found", f"{absolute(rel)} does not exist") from None
        raise
    for entry in listing.get("entries", []):
        if entry["path"] == rel:
            return entry_of(entry)
    raise RpcError("not_found", f"{absolute(rel)} does not exist")


async def _run(call: SandboxCall, argv: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = await call.upstream.call(
        "POST", session_path(call.sandbox_id, "process"), json_body={"command": argv})
    return result


async def list_dir(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    rel = relative(str(message.get("path", "")))
    depth = max(1, int_field(message, "depth", 1))
    if (await stat(call, rel))["type"] != "FILE_TYPE_DIRECTORY":
        raise RpcError("invalid_argument", f"{absolute(rel)} is not a directory")
    listing = await _listing(call, rel, recursive=depth > 1)
    base = len(rel.split("/")) if rel else 0
    entries = [entry_of(e) for e in listing.get("entries", []) if len(e["path"].split("/")) - base <= depth]
    return {"entries": entries}


async def stat_rpc(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    return {"entry": await stat(call, relative(str(message.get("path", ""))))}


async def make_dir(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    rel = relative(str(message.get("path", "")))
    try:
        await stat(call, rel)
    except RpcError:
        pass
    else:
        raise RpcError("already_exists", f"{absolute(rel)} already exists")
    result = await _run(call, ["mkdir", "-p", "--", absolute(rel)])
    if result.get("exit_code") != 0:
        raise RpcError("invalid_argument", (result.get("stderr") or "mkdir failed").strip())
    return {"entry": await stat(call, rel)}


async def move(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    source = relative(str(message.get("source", "")), what="source")
    destination = relative(str(message.get("destination", "")), what="destination")
    if not source or not destination:
        raise RpcError("invalid_argument", "the workspace itself cannot be moved, nor replaced")
    await stat(call, source)  # not_found first, as envd answers
    result = await _run(call, ["mv", "-T", "--", absolute(source), absolute(destination)])
    if result.get("exit_code") != 0:
        raise RpcError("invalid_argument", (result.get("stderr") or "mv failed").strip())
    return {"entry": await stat(call, destination)}


async def remove(call: SandboxCall, message: dict[str, Any]) -> dict[str, Any]:
    rel = relative(str(message.get("path", "")))
    if not rel:
        raise RpcError("invalid_argument", "the workspace itself cannot be removed")
    try:
        await call.upstream.call("DELETE", file_path(call.sandbox_id, rel), params={"recursive": "true"})
    except UpstreamError as exc:
        if exc.status == 404 and exc.code != SESSION_NOT_FOUND:
            raise RpcError("not_found", f"{absolute(rel)} does not exist") from None
        raise
    return {}


UNARY: dict[str, Callable[[SandboxCall, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "Stat": stat_rpc, "ListDir": list_dir, "MakeDir": make_dir, "Move": move, "Remove": remove,
}


# -- /files: envd's HTTP file transfer -------------------------------------------------------------


@routes.get("/sandbox/files")
async def download(request: web.Request) -> web.StreamResponse:
    try:
        call = SandboxCall(request)
        rel = relative(request.query.get("path", ""))
    except RpcError as exc:
        return envd_error(400, exc.message)
    if not rel:
        return envd_error(400, f"{absolute(rel)} is a directory")
    try:
        async with call.upstream.stream("GET", file_path(call.sandbox_id, rel)) as upstream:
            if "attachment" not in upstream.headers.get("Content-Disposition", ""):
                return envd_error(400, f"{absolute(rel)} is a directory")  # the API answers a listing
            response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            async for chunk in upstream.content.iter_chunked(CHUNK):
                await response.write(chunk)
            await response.write_eof()
            return response
    except UpstreamError as exc:
        if exc.status == 404 and exc.code != SESSION_NOT_FOUND:
            return envd_error(404, f"{absolute(rel)} does not exist")
        return _http_error(exc)


@routes.post("/sandbox/files")
async def upload(request: web.Request) -> web.Response:
    """A multipart body (one part per file, its filename the path) or, with `?path=`, the raw bytes."""
    try:
        call = SandboxCall(request)
        query_path = request.query.get("path")
        written: list[dict[str, Any]] = []
        if request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                if not isinstance(part, BodyPartReader):
                    return envd_error(400, "nested multipart bodies are not supported")
                name = _part_path(part) or query_path or ""
                written.append(await _put(call, relative(name), part.read_chunk))
        else:
            if not query_path:
                return envd_error(400, "give the file's path: ?path=...")
            written.append(await _put(call, relative(query_path), request.content.read))
    except RpcError as exc:
        return envd_error(400, exc.message)
    except UpstreamError as exc:
        return _http_error(exc)
    return web.json_response(written)


def _part_path(part: BodyPartReader) -> str | None:
    """A part's filename as sent: the SDK sends the file's path there, and aiohttp's own reading of it
    drops a leading '/', which would turn /workspace/a into the relative workspace/a."""
    message = Message()
    message["Content-Disposition"] = part.headers.get("Content-Disposition", "")
    name = message.get_param("filename", header="Content-Disposition")
    return collapse_rfc2231_value(name) if name else None


async def _put(call: SandboxCall, rel: str, read: Callable[[int], Awaitable[bytes]]) -> dict[str, Any]:
    if not rel:
        raise RpcError("invalid_argument", "give a file's path, not the workspace's")

    async def body():
        while chunk := await read(CHUNK):
            yield chunk

    await call.upstream.call("PUT", file_path(call.sandbox_id, rel), data=body(), params={"mkdirs": "true"})
    return {"name": posixpath.basename(rel), "type": "file", "path": absolute(rel)}


@routes.get("/sandbox/health")
async def health(request: web.Request) -> web.Response:
    """204 while the sandbox exists; 502 with envd's "sandbox not found" when it does not."""
    try:
        call = SandboxCall(request)
        await call.upstream.call("GET", session_path(call.sandbox_id))
    except RpcError as exc:
        return envd_error(400, exc.message)
    except UpstreamError as exc:
        return _http_error(exc)
    return web.Response(status=204)

