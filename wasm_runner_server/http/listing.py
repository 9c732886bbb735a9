"""Directory listings as the wire's FileListing, shared by a session's files and the shared/ routes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from wasm_runner.workspace import files as wf
from wasm_runner.workspace.file_errors import NoSuchFileError
from wasm_runner.workspace.relpaths import split_path
from wasm_runner_protocol.wire import FileEntry, FileListing


def entry_of(info: wf.FileInfo) -> FileEntry:
    return FileEntry(path=info.path, type=info.type, size=info.size,
                     mtime=datetime.fromtimestamp(info.mtime, tz=UTC))


async def listing_of(files: wf.WorkspaceFiles, path: str, recursive: bool, limit: int) -> FileListing:
    try:
        listing = await asyncio.to_thread(files.list, path, recursive=recursive, limit=limit)
    except NoSuchFileError:
        if split_path(path):
            raise
        listing = wf.Listing([], False)  # a session not used yet has an empty workspace
    return FileListing(path="/".join(split_path(path)), entries=[entry_of(i) for i in listing.entries],
                       truncated=listing.truncated)
