"""The file API of a session: raw bytes in and out (streamed, with Range), edits, listing, glob,
grep, multipart upload and folder archives. Everything about files is wasm_runner.files;
these handlers only translate HTTP."""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
import threading
from collections.abc import Generator
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import cast
from urllib.parse import unquote

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from wasm_runner.workspace import files as wf
from wasm_runner.workspace.budget import Budget
from wasm_runner.workspace.file_errors import FileOpError, FileTooLargeError, IsDirectoryError, NoSuchFileError
from wasm_runner.workspace.relpaths import join, split_path
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.wire import (
    ArchiveQuery,
    DeleteQuery,
    DeleteResult,
    EditResult,
    FileEdit,
    FileListing,
    GlobQuery,
    GlobResult,
    GrepMatch,
    GrepQuery,
    GrepResult,
    ListQuery,
    PutQuery,
    UploadQuery,
    UploadResult,
    WriteResult,
)
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.bodies import json_response, read_json, read_query
from wasm_runner_server.http.disk_quota import WriteBudget, existing_size, reserve
from wasm_runner_server.http.file_work import request_budget, run_file_work
from wasm_runner_server.http.listing import entry_of, listing_of
from wasm_runner_server.http.openapi import operation
from wasm_runner_server.http.paths import ANY_PATH
from wasm_runner_server.http.policy import POLICY
from wasm_runner_server.sessions.manager import LiveSession
from wasm_runner_server.sessions.service import SERVICE, Service

routes = web.RouteTableDef()
log = logging.getLogger("wasm_runner.server")

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_FILE_ERRORS = (400, 403, 404, 409)
GUEST_CONTENT_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""Bytes a guest wrote: opened directly in a browser they run no script, with no origin."""


def _context(request: web.Request) -> tuple[Service, LiveSession]:
    service = request.app[SERVICE]
    return service, service.sessions.get(request.match_info["id"])


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) for a single `bytes=` range; None to send everything (absent, multiple or malformed)."""
    if not header:
        return None
    match = _RANGE.match(header.strip())
    if match is None or (not match[1] and not match[2]):
        return None
    if not match[1]:  # suffix: the last N bytes
        length = int(match[2])
        if length == 0:
            raise _unsatisfiable(size)
        return max(size - length, 0), size
    start = int(match[1])
    end = int(match[2]) + 1 if match[2] else size
    if start >= size or end <= start:
        raise _unsatisfiable(size)
    return start, min(end, size)


def _unsatisfiable(size: int) -> ApiError:
    return ApiError(416, ErrorCode.RANGE_NOT_SATISFIABLE, f"the range is outside the file (size {size})",
                    "ask for bytes between 0 and size-1", {"Content-Range": f"bytes */{size}"})


# -- listing ----------------------------------------------------------------------------------


@routes.get("/v1/sessions/{id}/files")
@operation(summary="List files with sizes and modification times", tag="files", query=ListQuery,
           response=FileListing, errors=_FILE_ERRORS)
async def list_files(request: web.Request) -> web.Response:
    service, live = _context(request)
    query = read_query(request, ListQuery)
    files = service.sessions.files(live)
    return json_response(await listing_of(files, query.path, query.recursive, query.limit))


# -- read ---------------------------------------------------------------------------------------


@routes.get("/v1/sessions/{id}/files/" + ANY_PATH)
@operation(summary="Read a file as raw bytes (Range supported); a directory answers its listing",
           tag="files", response="application/octet-stream", errors=(*_FILE_ERRORS, 416))
async def read_file(request: web.Request) -> web.StreamResponse:
    service, live = _context(request)
    path = request.match_info["path"]
    files = service.sessions.files(live)
    split_path(path)
    if request.query:
        raise ApiError(422, ErrorCode.INVALID_QUERY, "reading a file takes no query parameters",
                       "use Range for part of a file, /files?path=...&recursive=true for listings")
    try:
        return await send_file(request, files, path)
    except IsDirectoryError:
        return json_response(await listing_of(files, path, False, 1000))
    except NoSuchFileError:
        if not split_path(path):
            return json_response(await listing_of(files, path, False, 1000))
        raise


async def send_file(request: web.Request, files: wf.WorkspaceFiles, path: str) -> web.StreamResponse:
    """The file's bytes (Range honoured), as a download: browsers neither render nor sniff it on the
    API's origin. A directory raises IsDirectoryError."""
    handle = files.open(path)
    with handle:
        info = handle.info
        span = _parse_range(request.headers.get("Range"), info.size)
        start, end = span if span is not None else (0, info.size)
        content_type = mimetypes.guess_type(info.path)[0] or "application/octet-stream"
        headers = {
            "Accept-Ranges": "bytes",
            "Last-Modified": format_datetime(datetime.fromtimestamp(info.mtime, tz=UTC), usegmt=True),
            "ETag": f'"{info.size:x}-{int(info.mtime * 1e6):x}"',
            "Content-Type": content_type,
            "Content-Disposition": f'attachment; filename="{_safe_filename(info.path.rsplit("/", 1)[-1])}"',
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": GUEST_CONTENT_CSP,
        }
        if span is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{info.size}"
        response = web.StreamResponse(status=206 if span is not None else 200, headers=headers)
        response.content_length = end - start
        await response.prepare(request)
        try:
            if request.method != "HEAD":
                for chunk in handle.chunks(start, end):
                    await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away mid-download
        return response


# -- write --------------------------------------------------------------------------------------


async def write_budget(request: web.Request, service: Service, live: LiveSession, files: wf.WorkspaceFiles,
                       path: str) -> WriteBudget:
    """Reservations for writing `path` into the session: its disk limit and its workspace's quota.
    Refused at once (413) when the session holds its maximum number of files."""
    limits = service.sessions.session_limits(live)
    _, session = service.sessions.core(live)
    credit = await asyncio.to_thread(existing_size, files, path)

    def measure() -> int:
        used_bytes, entries = session.workspace.usage(stop_after_files=limits.disk_files)
        if credit is None and entries + 1 > limits.disk_files:
            raise ApiError(413, ErrorCode.QUOTA_EXCEEDED, f"the workspace holds its maximum of {limits.disk_files} files",
                           "delete files first")
        return used_bytes

    return await reserve(service.disk, path, credit=credit or 0, session=(live.row.id, limits.disk_bytes, measure),
                         workspace=request.app[POLICY].workspace_quota(live.row.id))


async def observe_version(service: Service, live: LiveSession, files: wf.WorkspaceFiles, path: str) -> None:
    """Before an API write: keep the file as it is now if the host has not seen it so (history)."""
    if service.config.history.max_versions and not live.temporary:  # a temporary session keeps none
        await asyncio.to_thread(service.sessions.history(live).observe, files, join(split_path(path)))


async def record_version(service: Service, live: LiveSession, files: wf.WorkspaceFiles, path: str,
                         method: str) -> None:
    """After an API write: keep what it left (history)."""
    if service.config.history.max_versions and not live.temporary:
        await asyncio.to_thread(service.sessions.history(live).record, files, path, method)


def file_too_large(limit: int, path: str) -> ApiError:
    return ApiError(413, ErrorCode.FILE_TOO_LARGE, f"{path!r} is larger than the {limit}-byte limit for one file")


@routes.put("/v1/sessions/{id}/files/" + ANY_PATH)
@operation(summary="Write a file from the raw request body (streamed; atomic replace)", tag="files",
           body="application/octet-stream", body_required=False, query=PutQuery, response=WriteResult,
           status=201, also=(200,), errors=(*_FILE_ERRORS, 413),
           description="201 when the file was created, 200 when it replaced one.")
async def write_file(request: web.Request) -> web.Response:
    service, live = _context(request)
    path = request.match_info["path"]
    query = read_query(request, PutQuery)
    split_path(path)
    files = service.sessions.files(live, create=True)
    cap = service.config.server.max_file_bytes
    if request.content_length is not None and request.content_length > cap:
        raise file_too_large(cap, path)
    await observe_version(service, live, files, path)
    with await write_budget(request, service, live, files, path) as budget:
        if request.content_length:
            budget.take_upfront(request.content_length)  # refused before a byte is read
        with files.writer(path, max_bytes=cap, make_parents=query.mkdirs, reserve=budget.take) as writer:
            try:
                async for chunk in request.content.iter_chunked(wf.CHUNK):
                    writer.write(chunk)
            except FileTooLargeError:
                raise file_too_large(cap, path) from None
            result = writer.commit()
        budget.commit()
    await record_version(service, live, files, result.info.path, "put")
    service.sessions.touch(live)
    return json_response(WriteResult(path=result.info.path, size=result.info.size, created=result.created),
                         status=201 if result.created else 200)


@routes.post("/v1/sessions/{id}/files")
@operation(summary="Upload several files (multipart/form-data; each part's filename is its path, "
                   "percent-decoded)",
           tag="files", body="multipart/form-data", query=UploadQuery, response=UploadResult, status=201,
           errors=(*_FILE_ERRORS, 413, 415))
async def upload_files(request: web.Request) -> web.Response:
    service, live = _context(request)
    query = read_query(request, UploadQuery)
    base = split_path(query.dir)
    if not request.content_type.startswith("multipart/"):
        raise ApiError(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, "expected a multipart/form-data body",
                       "send one part per file, with the file's path as its filename")
    files = service.sessions.files(live, create=True)
    written: list[WriteResult] = []
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise ApiError(400, ErrorCode.INVALID_MULTIPART, "nested multipart bodies are not supported")
            name = unquote(part.filename or part.name or "")  # some clients percent-encode filenames
            if not name:
                raise ApiError(400, ErrorCode.INVALID_MULTIPART, "a part has neither a filename nor a name",
                               "give each part the file's path as its filename")
            path = "/".join((*base, *split_path(name)))
            cap = service.config.server.max_file_bytes
            await observe_version(service, live, files, path)
            with await write_budget(request, service, live, files, path) as budget:
                with files.writer(path, max_bytes=cap, reserve=budget.take) as writer:
                    try:
                        while chunk := await part.read_chunk(wf.CHUNK):
                            writer.write(chunk)
                    except FileTooLargeError:
                        raise file_too_large(cap, path) from None
                    result = writer.commit()
                budget.commit()
            await record_version(service, live, files, result.info.path, "upload")
            written.append(WriteResult(path=result.info.path, size=result.info.size, created=result.created))
    except (HttpProcessingError, ValueError, AssertionError) as exc:
        raise ApiError(400, ErrorCode.INVALID_MULTIPART, f"the multipart body is malformed: {exc}".strip(),
                       "send one part per file, with the file's path as its filename") from None
    service.sessions.touch(live)
    return json_response(UploadResult(files=written), status=201)


# -- delete and edit ------------------------------------------------------------------------------


@routes.delete("/v1/sessions/{id}/files/" + ANY_PATH)
@operation(summary="Delete a file, a symbolic link (not its target) or a directory", tag="files",
           query=DeleteQuery, response=DeleteResult, errors=_FILE_ERRORS)
async def delete_file(request: web.Request) -> web.Response:
    service, live = _context(request)
    query = read_query(request, DeleteQuery)
    files = service.sessions.files(live)
    info = await asyncio.to_thread(files.delete, request.match_info["path"], recursive=query.recursive)
    service.sessions.touch(live)
    return json_response(DeleteResult(path=info.path, type=info.type))


@routes.patch("/v1/sessions/{id}/files/" + ANY_PATH)
@operation(summary="Edit a text file: exact search-and-replace, or a unified diff", tag="files",
           body=FileEdit, response=EditResult, errors=(*_FILE_ERRORS, 413, 415),
           description="Missing old text: 422 edit_not_found. Old text occurring more than once (without "
                       "replace_all): 409 edit_not_unique. A diff that does not apply: 409 patch_failed.")
async def edit_file(request: web.Request) -> web.Response:
    service, live = _context(request)
    path = request.match_info["path"]
    body = await read_json(request, FileEdit)
    single = body.old_text is not None or body.new_text is not None
    if sum((single, body.edits is not None, body.patch is not None)) != 1:
        raise ApiError(422, ErrorCode.VALIDATION_ERROR, "give exactly one of: old_text and new_text, edits, patch")
    files = service.sessions.files(live)
    max_bytes = service.config.server.max_read_bytes
    # The result is bounded by the file-size limit before it is built, and its bytes are
    # reserved against the quotas as it is written.
    file_cap = min(service.config.server.max_file_bytes, max_bytes)
    await observe_version(service, live, files, path)
    with await write_budget(request, service, live, files, path) as reservation:
        room = reservation.room()
        cap = file_cap if room is None else min(file_cap, room)
        try:
            result = await _apply_edit(files, path, body, single, max_bytes, cap, reservation,
                                      request_budget(service))
        except FileTooLargeError as exc:
            if cap < file_cap:
                raise ApiError(413, ErrorCode.QUOTA_EXCEEDED, f"{exc.message}: the room left under the quota",
                               "delete files first, or edit fewer occurrences") from None
            raise
        reservation.commit()
    await record_version(service, live, files, result.info.path, "edit")
    service.sessions.touch(live)
    return json_response(EditResult(path=result.info.path, size=result.info.size,
                                    replacements=result.replacements, hunks=result.hunks))


async def _apply_edit(files: wf.WorkspaceFiles, path: str, body: FileEdit, single: bool, max_bytes: int, cap: int,
                      reservation: WriteBudget, budget: Budget) -> wf.EditResult:
    if body.patch is not None:
        return await run_file_work(budget, files.apply_patch, path, body.patch, max_bytes=max_bytes,
                                   max_result_bytes=cap, reserve=reservation.take)
    if single:
        if body.old_text is None or body.new_text is None:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "old_text and new_text go together")
        edits = [wf.TextEdit(body.old_text, body.new_text, body.replace_all)]
    else:
        edits = [wf.TextEdit(e.old_text, e.new_text, e.replace_all) for e in body.edits or []]
    return await run_file_work(budget, files.edit, path, edits, max_bytes=max_bytes, max_result_bytes=cap,
                               reserve=reservation.take)


# -- search ---------------------------------------------------------------------------------------


@routes.get("/v1/sessions/{id}/glob")
@operation(summary="Find paths by glob (* stays in one directory, ** spans any depth)", tag="files",
           query=GlobQuery, response=GlobResult, errors=_FILE_ERRORS)
async def glob_files(request: web.Request) -> web.Response:
    service, live = _context(request)
    query = read_query(request, GlobQuery)
    files = service.sessions.files(live)
    split_path(query.pattern, what="pattern")
    listing = await run_file_work(request_budget(service), files.glob, query.pattern, limit=query.limit)
    return json_response(GlobResult(pattern=query.pattern, matches=[entry_of(i) for i in listing.entries],
                                    truncated=listing.truncated))


@routes.get("/v1/sessions/{id}/grep")
@operation(summary="Search file contents by regular expression, with line numbers", tag="files",
           query=GrepQuery, response=GrepResult, errors=_FILE_ERRORS)
async def grep_files(request: web.Request) -> web.Response:
    service, live = _context(request)
    query = read_query(request, GrepQuery)
    files = service.sessions.files(live)
    try:
        found = await run_file_work(request_budget(service), files.grep, query.pattern, query.path, glob=query.glob,
                                    ignore_case=query.ignore_case, fixed_string=query.fixed_string,
                                    max_matches=query.max_matches)
    except NoSuchFileError:
        if split_path(query.path):
            raise
        found = wf.GrepResult()
    return json_response(GrepResult(pattern=query.pattern, matches=[GrepMatch(path=m.path, line=m.line, text=m.text)
                                                                   for m in found.matches],
                                    files_searched=found.files_searched, truncated=found.truncated,
                                    timed_out=found.timed_out))


# -- archive ---------------------------------------------------------------------------------------


@routes.get("/v1/sessions/{id}/archive")
@operation(summary="Download a folder as a zip or tar.gz archive (streamed; links left out)", tag="files",
           query=ArchiveQuery, response="application/octet-stream", errors=_FILE_ERRORS)
async def download_archive(request: web.Request) -> web.StreamResponse:
    service, live = _context(request)
    query = read_query(request, ArchiveQuery)
    files = service.sessions.files(live)
    if not files.exists() and not split_path(query.path):
        service.sessions.files(live, create=True)  # an unused session archives as empty
    budget = request_budget(service)
    chunks = cast(Generator[bytes, None, None], files.archive(query.path, query.format, budget=budget))
    turn = threading.Lock()  # the generator runs in one worker at a time; closing waits for a running step

    def step() -> bytes | None:
        with turn:
            budget.restart()
            return next(chunks, None)

    def close() -> None:
        with turn:
            chunks.close()

    parts = split_path(query.path)
    stem = parts[-1] if parts else live.row.id
    suffix = ".zip" if query.format == "zip" else ".tar.gz"
    response = web.StreamResponse(headers={
        "Content-Type": "application/zip" if query.format == "zip" else "application/gzip",
        "Content-Disposition": f'attachment; filename="{_safe_filename(stem)}{suffix}"',
    })
    response.enable_chunked_encoding()
    try:
        chunk = await asyncio.to_thread(step)  # before the headers: an error here still gets its error body
        await response.prepare(request)
        while chunk is not None:
            await response.write(chunk)
            chunk = await asyncio.to_thread(step)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away mid-download
    except asyncio.CancelledError:
        budget.cancel()  # the running step stops at its next check; close() below waits for it
        raise
    except FileOpError as exc:
        if not response.prepared:
            raise
        # Past the headers no error body can be sent: end the stream broken, not as a valid archive.
        log.info("archive stopped: %s", exc.message, extra={"event": "archive_stopped", "path": query.path})
        if request.transport is not None:
            request.transport.abort()
    finally:
        await asyncio.to_thread(close)
    return response


def _safe_filename(name: str) -> str:
    return re.sub(r'[^A-Za-z0-9._-]', "_", name)[:100] or "workspace"
