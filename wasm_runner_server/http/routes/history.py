"""A session's file history: the versions API writes kept, one version's bytes, and a diff."""

from __future__ import annotations

import asyncio
import hashlib

from aiohttp import web

from wasm_runner.workspace.history import VersionNotFoundError
from wasm_runner.workspace.relpaths import join, split_path
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import DiffQuery, FileDiff, FileHistory, FileVersion, HistoryQuery, VersionQuery
from wasm_runner_server.errors import not_found
from wasm_runner_server.http.bodies import json_response, read_query
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.routes.files import GUEST_CONTENT_CSP
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()
_ERRORS = (400, 404, 409)


def _path(raw: str) -> str:
    return join(split_path(raw))


@routes.get("/v1/sessions/{id}/history")
@operation(summary="The versions of a file kept from API writes (and changes found before them)", tag="files",
           query=HistoryQuery, response=FileHistory, errors=_ERRORS,
           description="Every PUT, PATCH and upload keeps what it left; a file changed by something else (the "
                       "guest) since is kept as an `outside` version before the next write. Bounded per session "
                       "by [history] max_versions and max_bytes (the oldest go first).")
async def file_history(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    query = read_query(request, HistoryQuery)
    path = _path(query.path)
    files = service.sessions.files(live)
    history = service.sessions.history(live)
    versions = await asyncio.to_thread(history.versions, path)
    current = await asyncio.to_thread(history.current, files, path)
    current_sha = hashlib.sha256(current).hexdigest() if current is not None else None
    return json_response(FileHistory(
        path=path, current_sha256=current_sha,
        changed_outside=bool(versions) and current_sha != versions[-1].sha256,
        versions=[FileVersion(version=v.version, sha256=v.sha256, size=v.size, source=v.source, method=v.method,
                              recorded_at=v.recorded_at) for v in versions]))


@routes.get("/v1/sessions/{id}/history/content")
@operation(summary="One kept version of a file, as raw bytes", tag="files", query=VersionQuery,
           response="application/octet-stream", errors=_ERRORS)
async def version_content(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    query = read_query(request, VersionQuery)
    path = _path(query.path)
    try:
        data = await asyncio.to_thread(service.sessions.history(live).read, path, query.version)
    except VersionNotFoundError:
        raise _no_version(path, query.version) from None
    return web.Response(body=data, headers={"Content-Type": "application/octet-stream",
                                            "Content-Disposition": "attachment",
                                            "X-Content-Type-Options": "nosniff",
                                            "Content-Security-Policy": GUEST_CONTENT_CSP})


@routes.get("/v1/sessions/{id}/history/diff")
@operation(summary="A unified diff between two kept versions of a file, or a version and the file now",
           tag="files", query=DiffQuery, response=FileDiff, errors=_ERRORS,
           description="Without to_version: the file as it is now; without from_version: the version before.")
async def file_diff(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    live = service.sessions.get(request.match_info["id"])
    query = read_query(request, DiffQuery)
    path = _path(query.path)
    files = service.sessions.files(live)
    history = service.sessions.history(live)
    try:
        old, new, diff, binary = await asyncio.to_thread(history.diff, files, path, query.from_version,
                                                         query.to_version, context=query.context)
    except VersionNotFoundError:
        raise _no_version(path, query.to_version or query.from_version or 0) from None
    return json_response(FileDiff(path=path, from_version=old, to_version=new, diff=diff, binary=binary))


def _no_version(path: str, version: int):
    return not_found(ErrorCode.VERSION_NOT_FOUND, f"{path}@{version}",
                     "GET /v1/sessions/{id}/history?path=... lists the versions kept")
