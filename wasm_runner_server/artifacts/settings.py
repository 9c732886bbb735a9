"""The `[artifacts]` and `[history]` sections of the service's configuration.

    [artifacts]
    retention_days = 30                     # null: kept until deleted
    workspace_retention_days = {acme = 365} # per workspace, instead of the default
    max_bytes = 268435456                   # largest artifact (a folder's archive included)
    link_default_s = 3600                   # presigned download links
    link_max_s = 604800

    [history]                               # earlier versions of files written through the API, per session
    max_versions = 200
    max_bytes = 33554432                    # distinct content kept (not counted in the disk quotas)
    max_file_bytes = 1048576                # larger files are not kept
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from wasm_runner.profiles import ConfigModel
from wasm_runner.workspace.history import MAX_BYTES, MAX_FILE_BYTES, MAX_VERSIONS

Days = Annotated[float, Field(gt=0)]


class ArtifactSettings(ConfigModel):
    retention_days: Days | None = 30
    """How long an artifact is kept after it is published (null: until deleted)."""
    workspace_retention_days: dict[str, Days | None] = {}
    """Per workspace, instead of `retention_days`."""
    max_bytes: Annotated[int, Field(ge=1)] = 256 * 1024 * 1024
    link_default_s: Annotated[float, Field(gt=0)] = 3600
    link_max_s: Annotated[float, Field(gt=0)] = 7 * 86400
    prune_interval_s: Annotated[float, Field(gt=0)] = 3600
    """How often expired artifacts are looked for (and once at start)."""

    def retention_s(self, workspace: str) -> float | None:
        days = self.workspace_retention_days.get(workspace, self.retention_days)
        return days * 86400 if days is not None else None


class HistorySettings(ConfigModel):
    max_versions: Annotated[int, Field(ge=0)] = MAX_VERSIONS
    """Versions kept per session, across its files (the oldest dropped first); 0 turns history off."""
    max_bytes: Annotated[int, Field(ge=0)] = MAX_BYTES
    """Distinct content kept per session: host storage beside the session's files, outside its disk limit
    and the workspace quota (deleting files could not free it); removed with the session."""
    max_file_bytes: Annotated[int, Field(ge=0)] = MAX_FILE_BYTES
    """Larger files get no versions."""
