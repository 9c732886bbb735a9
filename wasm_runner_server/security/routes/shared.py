"""The workspace's shared/ directory over HTTP (member and admin keys; app keys have none).

Sessions opened with a member key see the same directory read-write at /workspace/shared.
Every write here goes to a temporary file renamed into place, so concurrent writers of
one file end with the later write whole, and no reader ever sees a torn file.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from wasm_runner.workspace import files as wf
from wasm_runner.workspace.file_errors import FileTooLargeError
from wasm_runner.workspace.relpaths import split_path
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import DeleteQuery, DeleteResult, FileListing, ListQuery, WriteResult
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_query
from wasm_runner_server.http.disk_quota import existing_size, reserve
from wasm_runner_server.http.listing import listing_of
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import ANY_PATH
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.http.routes.files import file_too_large, send_file
from wasm_runner_server.security.state import SECURITY
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()


def _shared(request: web.Request) -> wf.WorkspaceFiles:
    principal = principal_of(request)
    if not principal.shared:
        raise ApiError(404, ErrorCode.SHARED_NOT_FOUND, "keys of kind 'app' have no shared directory",
                       "use a member key, or the session's own files")
    return wf.WorkspaceFiles(request.app[SECURITY].shared_dir(principal.workspace))


@routes.get("/v1/shared/files")
@operation(summary="List the workspace's shared/ directory", tag="shared", query=ListQuery,
           response=FileListing, errors=(404,))
async def list_shared(request: web.Request) -> web.Response:
    files = _shared(request)
    query = read_query(request, ListQuery)
    return json_response(await listing_of(files, query.path, query.recursive, query.limit))


@routes.get("/v1/shared/files/" + ANY_PATH)
@operation(summary="Read a file of shared/", tag="shared", response="application/octet-stream",
           errors=(403, 404, 409))
async def read_shared(request: web.Request) -> web.StreamResponse:
    return await send_file(request, _shared(request), request.match_info["path"])


@routes.put("/v1/shared/files/" + ANY_PATH)
@operation(summary="Write a file of shared/ (atomic: temporary file, then rename; the later write wins)",
           tag="shared", body="application/octet-stream", body_required=False, response=WriteResult,
           status=201, also=(200,), errors=(403, 404, 409, 413))
async def write_shared(request: web.Request) -> web.Response:
    files = _shared(request)
    path = request.match_info["path"]
    split_path(path)
    security = request.app[SECURITY]
    cap = request.app[SERVICE].config.server.max_file_bytes
    if request.content_length is not None and request.content_length > cap:
        raise file_too_large(cap, path)
    credit = await asyncio.to_thread(existing_size, files, path)
    budget = await reserve(request.app[SERVICE].disk, path, credit=credit or 0,
                           workspace=security.workspace_quota(principal_of(request).workspace))
    with budget:
        if request.content_length:
            budget.take_upfront(request.content_length)
        with files.writer(path, max_bytes=cap, make_parents=True, reserve=budget.take) as writer:
            try:
                async for chunk in request.content.iter_chunked(wf.CHUNK):
                    writer.write(chunk)
            except FileTooLargeError:
                raise file_too_large(cap, path) from None
            result = writer.commit()
        budget.commit()
    return json_response(WriteResult(path=result.info.path, size=result.info.size, created=result.created),
                         status=201 if result.created else 200)


@routes.delete("/v1/shared/files/" + ANY_PATH)
@operation(summary="Delete a file or directory of shared/", tag="shared", query=DeleteQuery,
           response=DeleteResult, errors=(403, 404, 409))
async def delete_shared(request: web.Request) -> web.Response:
    files = _shared(request)
    query = read_query(request, DeleteQuery)
    info = await asyncio.to_thread(files.delete, request.match_info["path"], recursive=query.recursive)
    return json_response(DeleteResult(path=info.path, type=info.type))
