"""Templates: a session's state (files, packages, kernels) published under a name, so that new
sessions start from it and their first call never pays for preparing it.

A template is a copy of the session's directory (made as a fork makes its children, after
saving the live kernels), kept in the owner's template directory under its name with a small
record beside it. Starting a session from it copies it into the new session's directory; the
kernels are restored by the session's first call, reseeded like a fork's children. The owner's
directory is the caller's to choose (the service keeps each workspace's apart, where its disk
quota counts them); names are checked here again, so a name never leaves that directory.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wasm_runner.errors import InvalidRequestError, WasmRunnerError
from wasm_runner.workspace.clone import clone_tree
from wasm_runner.workspace.layout import discard_tree, tree_usage

if TYPE_CHECKING:
    from wasm_runner.session import Session

__all__ = ["TemplateNotFound", "TemplateRecord", "Templates"]

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
LINKED = frozenset({"packages", "kernel"})


class TemplateNotFound(WasmRunnerError):
    """No template of that name here."""


@dataclass
class TemplateRecord:
    name: str
    created_at: float
    bytes: int
    kernels: list[str] = field(default_factory=list)
    fresh_kernels: dict[str, str] = field(default_factory=dict)


class Templates:
    """One owner's templates (see the module's docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _paths(self, name: str) -> tuple[Path, Path]:
        if not NAME.fullmatch(name):
            raise InvalidRequestError(f"{name!r} is not a template name (lower-case letters, digits, '.', '_', '-')")
        return self.directory / name, self.directory / f"{name}.json"

    def publish(self, session: Session, name: str, *, skip: frozenset[str] = frozenset()) -> TemplateRecord:
        """Save `session`'s live kernels and copy its directory as the template `name` (replacing
        one of that name)."""
        target, record_file = self._paths(name)
        refused = session.save_kernels()
        session.workspace.ensure()
        session.packages.ensure()
        self.directory.mkdir(parents=True, exist_ok=True)
        staging = self.directory / f".{name}.{uuid.uuid4().hex}"
        try:
            clone_tree(session.workspace.root, staging, LINKED, skip)
            record = TemplateRecord(name, time.time(), tree_usage([staging])[0],
                                    sorted(p.stem for p in (staging / "kernel").glob("*.snap")), refused)
            old = self.directory / f".{name}.old.{uuid.uuid4().hex}"
            if target.exists():
                os.rename(target, old)
            os.rename(staging, target)
            tmp = record_file.with_name(f".{record_file.name}.tmp")
            tmp.write_text(json.dumps(asdict(record)))
            os.replace(tmp, record_file)
            discard_tree(old)
        finally:
            discard_tree(staging)
        return record

    def start(self, name: str, session: Session) -> TemplateRecord:
        """Make the new session `session` (nothing on disk yet) a copy of the template."""
        record = self.get(name)
        target, _ = self._paths(name)
        root = session.workspace.root
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            clone_tree(target, root, LINKED)
        except BaseException:
            discard_tree(root)
            raise
        return record

    def get(self, name: str) -> TemplateRecord:
        target, record_file = self._paths(name)
        try:
            fields = json.loads(record_file.read_text())
        except FileNotFoundError:
            raise TemplateNotFound(f"no template {name!r} in this workspace") from None
        if not target.is_dir():
            raise TemplateNotFound(f"no template {name!r} in this workspace")
        return TemplateRecord(**fields)

    def list(self) -> list[TemplateRecord]:
        if not self.directory.is_dir():
            return []
        names = sorted(p.stem for p in self.directory.glob("*.json") if NAME.fullmatch(p.stem))
        records = []
        for name in names:
            try:
                records.append(self.get(name))
            except TemplateNotFound:
                continue
        return records

    def delete(self, name: str) -> None:
        target, record_file = self._paths(name)
        if not record_file.exists():
            raise TemplateNotFound(f"no template {name!r} in this workspace")
        record_file.unlink()
        discard_tree(target)
