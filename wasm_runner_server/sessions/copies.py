"""Sessions made as copies: forks of a live session, and templates a workspace publishes and
starts sessions from (the core's `Session.fork` and `snapshots.Templates` do the copying). A node
keeps its workspaces' templates in its data directory; a cluster's are the cluster's
(`template_catalog.SharedTemplates`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from wasm_runner.providers.native.web_starters import copy_starter
from wasm_runner.snapshots.fork import ForkResult
from wasm_runner.snapshots.templates import TemplateRecord, Templates
from wasm_runner.workspace.history import HISTORY_DIR
from wasm_runner.workspace.layout import tree_usage
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.sessions.manager import LiveSession, SessionManager

if TYPE_CHECKING:
    from wasm_runner_server.sessions.template_catalog import SharedTemplates

__all__ = ["SessionCopies"]

NOT_COPIED = frozenset({HISTORY_DIR})
"""What a copy leaves out: the parent's file history is the parent's."""
DEFAULT_OWNER = "default"
"""Whose templates they are where the service has no tenants."""


class SessionCopies:
    def __init__(self, sessions: SessionManager, workspaces: Path, shared: SharedTemplates | None = None) -> None:
        self.sessions = sessions
        self.workspaces = workspaces
        """Where each workspace's own directory is (StorageSettings.workspaces_dir)."""
        self.shared = shared
        """A cluster's templates, which any node lists and starts sessions from (None: this node's)."""

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()

    def _local(self, owner: str) -> Templates:
        """A workspace's templates on this node: beside its shared/ directory, where its disk quota counts
        them (never inside what a guest sees)."""
        return Templates(self.workspaces / (owner or DEFAULT_OWNER) / "templates")

    def template(self, owner: str, name: str) -> TemplateRecord:
        """The workspace's template `name` (TemplateNotFound; InvalidRequestError: not a template name)."""
        return self.shared.get(owner or DEFAULT_OWNER, name) if self.shared is not None else self._local(owner).get(name)

    def list_templates(self, owner: str) -> list[TemplateRecord]:
        return self.shared.in_workspace(owner or DEFAULT_OWNER) if self.shared is not None else self._local(owner).list()

    def delete_template(self, owner: str, name: str) -> None:
        if self.shared is not None:
            self.shared.delete(owner or DEFAULT_OWNER, name)
        else:
            self._local(owner).delete(name)

    def templates_stored(self, owner: str) -> int:
        """A cluster's: the bytes of the workspace's templates, which its disk quota counts (a node's
        templates are in the workspace's directory, where its measure finds them)."""
        return self.shared.stored_bytes(owner or DEFAULT_OWNER) if self.shared is not None else 0

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
        if self.shared is not None:
            return await asyncio.to_thread(self.shared.publish, core, owner or DEFAULT_OWNER, name, NOT_COPIED)
        return await asyncio.to_thread(self._local(owner).publish, core, name, skip=NOT_COPIED)

    async def start_starter(self, live: LiveSession, name: str) -> None:
        """Put the web starter `name` into the new session `live`'s files (before its first call)."""
        _, core = self.sessions.core(live)
        await asyncio.to_thread(copy_starter, name, core.workspace.files)

    async def start(self, live: LiveSession, owner: str, name: str) -> TemplateRecord:
        """Make the new session `live` a copy of the template (before its first call)."""
        _, core = self.sessions.core(live)
        if self.shared is not None:
            return await asyncio.to_thread(self.shared.start, owner or DEFAULT_OWNER, name, core)
        return await asyncio.to_thread(self._local(owner).start, name, core)
