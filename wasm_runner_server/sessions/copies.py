"""Sessions made as copies: forks of a live session, and templates a workspace publishes and
starts sessions from (the core's `Session.fork` and `snapshots.Templates` do the copying)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wasm_runner.providers.native.web_starters import copy_starter
from wasm_runner.snapshots.fork import ForkResult
from wasm_runner.snapshots.templates import TemplateRecord, Templates
from wasm_runner.workspace.history import HISTORY_DIR
from wasm_runner.workspace.layout import tree_usage
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.sessions.manager import LiveSession, SessionManager

__all__ = ["SessionCopies"]

NOT_COPIED = frozenset({HISTORY_DIR})
"""What a copy leaves out: the parent's file history is the parent's."""
DEFAULT_OWNER = "default"
"""Whose templates they are where the service has no tenants."""


class SessionCopies:
    def __init__(self, sessions: SessionManager, data_dir: Path) -> None:
        self.sessions = sessions
        self.data_dir = data_dir

    def templates(self, owner: str) -> Templates:
        """A workspace's templates: beside its shared/ directory, where its disk quota counts them
        (never inside what a guest sees)."""
        return Templates(self.data_dir / "workspaces" / (owner or DEFAULT_OWNER) / "templates")

    async def size(self, live: LiveSession) -> int:
        """Bytes a copy of the session takes."""
        _, core = self.sessions.core(live)
        return (await asyncio.to_thread(tree_usage, [core.workspace.root]))[0]

    def _own_directory(self, live: LiveSession, what: str) -> None:
        """Refuse (422) to copy a session whose /workspace is a disk of a layout: a member's disk is
        its member's, not the session's, and an end user's root is that one chat's."""
        if self.sessions.disk_for(live.row.id).files is not None:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, f"session {live.row.id!r} works on a member's disk or "
                           f"an end user's root, which is not the session's to {what}",
                           "create another session: a member's sessions all see the member's disk")

    async def fork(self, live: LiveSession, count: int) -> tuple[list[LiveSession], ForkResult]:
        self._own_directory(live, "copy")
        _, core = self.sessions.core(live)
        result = await asyncio.to_thread(core.fork, count, skip=NOT_COPIED)
        return [self.sessions.add_copy(live, child) for child in result.children], result

    async def publish(self, live: LiveSession, owner: str, name: str) -> TemplateRecord:
        self._own_directory(live, "publish as a template")
        _, core = self.sessions.core(live)
        return await asyncio.to_thread(self.templates(owner).publish, core, name, skip=NOT_COPIED)

    async def start_starter(self, live: LiveSession, name: str) -> None:
        """Put the web starter `name` into the new session `live`'s files (before its first call)."""
        _, core = self.sessions.core(live)
        await asyncio.to_thread(copy_starter, name, core.workspace.files)

    async def start(self, live: LiveSession, owner: str, name: str) -> TemplateRecord:
        """Make the new session `live` a copy of the template (before its first call)."""
        _, core = self.sessions.core(live)
        return await asyncio.to_thread(self.templates(owner).start, name, core)
