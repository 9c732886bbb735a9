"""Mount: a host directory shown to a guest, the same for the WebAssembly and native tiers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasm_runner.errors import InvalidMountError
from wasm_runner.workspace.quota import DiskBudget
from wasm_runner_protocol.guest import check_guest_path

__all__ = ["Mount"]


@dataclass(frozen=True)
class Mount:
    """A host directory shown to the guest at `guest` (read-only unless `writable`).

    `guest` is absolute, not /, /workspace or /tmp themselves and has no '..' (a trailing '/'
    is dropped); a mount inside /workspace (e.g. /workspace/shared) takes precedence there.
    A writable mount counts against the session's disk limits, unless it has a `budget` of
    its own: then that budget limits it. A `shared` one holds more than the session's files
    (e.g. a workspace's shared/ directory): only what a run adds there counts, against that
    run's allowance (see wasm_runner.workspace.quota.RunDisk). An `alias` shows a directory the
    session already sees (its /workspace, or a shared mount) at one more path: never counted again."""

    host: Path
    guest: str
    writable: bool = False
    budget: DiskBudget | None = field(default=None, compare=False)
    shared: bool = False
    alias: bool = False

    def __post_init__(self) -> None:
        try:
            guest = check_guest_path(self.guest)
        except ValueError as exc:
            raise InvalidMountError(str(exc)) from None
        object.__setattr__(self, "guest", guest)
        if not isinstance(self.host, Path):
            object.__setattr__(self, "host", Path(os.fspath(self.host)))

    def to_config(self) -> dict[str, Any]:
        """As JSON (to a worker process); the budget stays with this process, which tells the
        worker when it is exceeded (`budgeted`)."""
        return {"host": str(self.host), "guest": self.guest, "writable": self.writable,
                "budgeted": self.budget is not None, "shared": self.shared, "alias": self.alias}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Mount:
        return cls(Path(config["host"]), config["guest"], bool(config.get("writable", False)),
                   shared=bool(config.get("shared", False)), alias=bool(config.get("alias", False)))
