"""Artifacts over HTTP: publish a session's file or folder, list, get, download, delete, and presigned
download links. An artifact belongs to the workspace of the key that published it; any other
workspace gets exactly the 404 of an artifact that does not exist, links included."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

from aiohttp import web

from wasm_runner.workspace.relpaths import join, split_path
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import (
    ArtifactCreate,
    ArtifactInfo,
    ArtifactList,
    ArtifactListQuery,
    ArtifactPresignBody,
    PresignResult,
)
from wasm_runner_server.artifacts.catalog import Artifact
from wasm_runner_server.artifacts.storage import BlobTooLargeError
from wasm_runner_server.errors import ApiError, not_found
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.file_work import request_budget
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import ARTIFACT_LINK_PREFIX
from wasm_runner_server.http.policy import principal_of
from wasm_runner_server.http.public_url import absolute
from wasm_runner_server.http.routes.files import GUEST_CONTENT_CSP
from wasm_runner_server.security.state import SECURITY, Security
from wasm_runner_server.sessions.cursor import decode_cursor, encode_cursor
from wasm_runner_server.sessions.manager import temporary_refused
from wasm_runner_server.sessions.service import SERVICE

routes = web.RouteTableDef()
LINK_METHOD = "ARTIFACT"
"""What an artifact link's signature covers instead of a file link's GET/PUT: the two never stand for each other."""


def info_of(artifact: Artifact) -> ArtifactInfo:
    return ArtifactInfo(id=artifact.id, name=artifact.name, media_type=artifact.media_type, size=artifact.size,
                        sha256=artifact.sha256, session=artifact.session, source_path=artifact.source_path,
                        key_id=artifact.key_id, note=artifact.note, created_at=artifact.created_at,
                        expires_at=artifact.expires_at)


def _not_found(artifact_id: str) -> ApiError:
    return not_found(ErrorCode.ARTIFACT_NOT_FOUND, artifact_id, "GET /v1/artifacts lists this workspace's artifacts")


def _owned(request: web.Request) -> tuple[Security, Artifact]:
    security = request.app[SECURITY]
    artifact_id = request.match_info["artifact"]
    artifact = security.artifacts.get(artifact_id, principal_of(request).workspace)
    if artifact is None:
        raise _not_found(artifact_id)
    return security, artifact


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100] or "artifact"


@routes.post("/v1/sessions/{id}/artifacts")
@operation(summary="Publish a workspace file (a folder: as an archive) as an immutable artifact", tag="artifacts",
           body=ArtifactCreate, response=ArtifactInfo, status=201, errors=(400, 404, 409, 413, 422),
           description="The bytes are copied into the artifact store, which keeps them past the session's TTL "
                       "under the workspace's retention ([artifacts]). Working files are never published "
                       "otherwise.")
async def publish(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    security = request.app[SECURITY]
    live = service.sessions.get(request.match_info["id"])
    body = await read_json(request, ArtifactCreate)
    if live.temporary:  # nothing of it may outlive it
        raise temporary_refused("publishes no artifact")
    principal = principal_of(request)
    parts = split_path(body.path)
    path = join(parts)
    files = service.sessions.files(live, create=True)
    entry = await asyncio.to_thread(files.stat, path)
    budget = request_budget(service)
    chunks: Iterator[bytes]
    media_type: str | None
    if entry.type == "directory":
        suffix = ".zip" if body.format == "zip" else ".tar.gz"
        name = body.name or (parts[-1] if parts else live.row.id) + suffix
        media_type = body.media_type or ("application/zip" if body.format == "zip" else "application/gzip")
        archive = files.archive(path, body.format, budget=budget)

        def restarted() -> Iterator[bytes]:
            for chunk in archive:  # the budget bounds each chunk, as for a download
                budget.restart()
                yield chunk

        chunks = restarted()
    elif entry.type == "file":
        handle = await asyncio.to_thread(files.open, path)
        name, media_type = body.name or parts[-1], body.media_type

        def read() -> Iterator[bytes]:
            with handle:
                yield from handle.chunks()

        chunks = read()
    else:
        raise ApiError(409, ErrorCode.NOT_A_FILE, f"{path!r} is a {entry.type}; only files and folders are published",
                       "publish a regular file or a folder")
    owner = security.tenants.owner(live.row.id)
    ephemeral = bool(owner and owner.ephemeral)
    try:
        artifact = await asyncio.to_thread(security.artifacts.publish, chunks, workspace=principal.workspace,
                                           key_id=principal.key_id, session=live.row.id,
                                           source_path=None if ephemeral else path, name=name,
                                           media_type=media_type, note=body.note)
    except BlobTooLargeError as exc:
        raise ApiError(413, ErrorCode.FILE_TOO_LARGE, f"{path!r} is larger than the {exc.limit}-byte limit of an "
                       "artifact", "publish a smaller file or folder ([artifacts] max_bytes)") from None
    except asyncio.CancelledError:
        budget.cancel()
        raise
    security.audit.record_artifact(workspace=principal.workspace, key_id=principal.key_id, session=live.row.id,
                                   ephemeral=ephemeral, mode="publish", artifact_id=artifact.id, path=path,
                                   status=201)
    return json_response(info_of(artifact), status=201)


@routes.get("/v1/artifacts")
@operation(summary="The workspace's artifacts, oldest first", tag="artifacts", query=ArtifactListQuery,
           response=ArtifactList, errors=(400,))
async def list_artifacts(request: web.Request) -> web.Response:
    security = request.app[SECURITY]
    query = read_query(request, ArtifactListQuery)
    after = decode_cursor(query.cursor) if query.cursor else None
    rows = await asyncio.to_thread(security.artifacts.catalog.page, principal_of(request).workspace,
                                   session=query.session, after=after, limit=query.limit + 1)
    now = time.time()
    live = [a for a in rows[:query.limit] if a.expires_at is None or a.expires_at > now]
    cursor = encode_cursor(rows[query.limit - 1].created_at, rows[query.limit - 1].id) if len(rows) > query.limit else None
    return json_response(ArtifactList(artifacts=[info_of(a) for a in live], next_cursor=cursor))


@routes.get("/v1/artifacts/{artifact}")
@operation(summary="An artifact's metadata", tag="artifacts", response=ArtifactInfo, errors=(404,))
async def get_artifact(request: web.Request) -> web.Response:
    _, artifact = _owned(request)
    return json_response(info_of(artifact))


@routes.get("/v1/artifacts/{artifact}/content")
@operation(summary="An artifact's bytes, as a download", tag="artifacts", response="application/octet-stream",
           errors=(404,))
async def artifact_content(request: web.Request) -> web.StreamResponse:
    security, artifact = _owned(request)
    return await _send(request, security, artifact)


@routes.delete("/v1/artifacts/{artifact}")
@operation(summary="Delete an artifact (its bytes go once no artifact names them)", tag="artifacts",
           response=ArtifactInfo, errors=(404,))
async def delete_artifact(request: web.Request) -> web.Response:
    security, artifact = _owned(request)
    principal = principal_of(request)
    await asyncio.to_thread(security.artifacts.delete, artifact)
    owner = security.tenants.owner(artifact.session) if artifact.session else None
    security.audit.record_artifact(workspace=principal.workspace, key_id=principal.key_id, session=artifact.session,
                                   ephemeral=bool(owner and owner.ephemeral), mode="delete", artifact_id=artifact.id,
                                   path=artifact.source_path, status=200)
    return json_response(info_of(artifact))


@routes.post("/v1/artifacts/{artifact}:presign")
@operation(summary="A link that downloads this artifact without a key until it expires", tag="artifacts",
           body=ArtifactPresignBody, body_required=False, response=PresignResult, errors=(404, 422))
async def presign_artifact(request: web.Request) -> web.Response:
    security, artifact = _owned(request)
    body = await read_json(request, ArtifactPresignBody, empty_ok=True)
    settings = request.app[SERVICE].config.artifacts
    expires_in = body.expires_in if body.expires_in is not None else settings.link_default_s
    if expires_in > settings.link_max_s:
        raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM, f"expires_in = {expires_in:g} exceeds the maximum "
                       f"{settings.link_max_s:g}", f"ask for at most {settings.link_max_s:g} seconds")
    principal = principal_of(request)
    token, expires = security.signer.token(LINK_METHOD, artifact.workspace, artifact.id, "", expires_in,
                                           incarnation=artifact.sha256, key_id=principal.key_id)
    return json_response(PresignResult(url=absolute(request, f"{ARTIFACT_LINK_PREFIX}{token}/{artifact.id}"), method="GET",
                                       expires_at=expires, expires_in=round(expires - time.time(), 3)))


# Not in /openapi.json: a link is an opaque URL handed out by :presign.
@routes.get(ARTIFACT_LINK_PREFIX + "{token}/{artifact}")
async def follow_artifact_link(request: web.Request) -> web.StreamResponse:
    security = request.app[SECURITY]
    artifact_id = request.match_info["artifact"]
    if request.query_string:
        raise _not_found(artifact_id)
    artifact = security.artifacts.catalog.get(artifact_id)
    if artifact is None:
        raise _not_found(artifact_id)
    try:
        key_id = security.signer.verify(request.match_info["token"], LINK_METHOD, artifact.workspace, artifact.id,
                                        "", incarnation=artifact.sha256)
    except ApiError as exc:
        if exc.code == ErrorCode.LINK_EXPIRED:
            raise
        raise _not_found(artifact_id) from None  # a link of another workspace reveals nothing of this one
    artifact = security.artifacts.get(artifact_id, artifact.workspace)  # not expired meanwhile
    if artifact is None:
        raise _not_found(artifact_id)
    security.authenticator.admit_link(key_id)
    return await _send(request, security, artifact)


async def _send(request: web.Request, security: Security, artifact: Artifact) -> web.StreamResponse:
    chunks = security.artifacts.content(artifact)
    response = web.StreamResponse(headers={
        "Content-Type": artifact.media_type,
        "Content-Disposition": f'attachment; filename="{_safe_name(artifact.name)}"',
        "ETag": f'"{artifact.sha256}"',
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": GUEST_CONTENT_CSP,
        "Cache-Control": "private, max-age=0",
    })
    response.content_length = artifact.size
    await response.prepare(request)
    try:
        if request.method != "HEAD":
            while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
                await response.write(chunk)
        await response.write_eof()
    except ConnectionResetError:
        pass
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return response
