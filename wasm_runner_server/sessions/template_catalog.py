"""A cluster's templates: their records in the shared database, their trees in the shared object store.

A publish stores the template's directory as a tree of its own, `tpl-<random>`, written once as a
session's generation is (`SessionStorage.save`), and then points the row at it; republishing makes a new
tree and deletes the one the row named before. A tree never changes, so a node's copy of one
(`<data_dir>/template-trees/<tree>/`) never goes stale: the node starts sessions from its copy, fetching
it first if it has none, and deletes the copies no row names any more.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from wasm_runner.snapshots.templates import TemplateNotFound, TemplateRecord, Templates
from wasm_runner.workspace.layout import discard_tree
from wasm_runner_server.metadata import postgres

if TYPE_CHECKING:
    from wasm_runner.session import Session
    from wasm_runner_server.storage.sessions import SessionStorage

__all__ = ["SharedTemplates", "TemplateCatalog", "new_tree_id"]

_COLUMNS = "name, created_at, bytes, kernels, fresh_kernels, stored_as"


def new_tree_id() -> str:
    """A new tree's name in the object store (beside the sessions', and never one of theirs)."""
    return "tpl-" + secrets.token_hex(16)


def _record(row: tuple) -> tuple[TemplateRecord, str]:
    name, created_at, size, kernels, fresh, stored_as = row
    return TemplateRecord(name, created_at, size, json.loads(kernels), json.loads(fresh)), stored_as


class TemplateCatalog:
    """The templates' rows (see the module's docstring)."""

    def __init__(self, db: postgres.Postgres) -> None:
        self._db = db

    def close(self) -> None:
        postgres.release(self._db)

    def put(self, workspace: str, record: TemplateRecord, stored_as: str) -> str | None:
        """Make `record` the workspace's template of its name, stored as `stored_as`; the tree it replaces."""
        fields = asdict(record)
        with self._db.transaction() as conn:
            old = conn.execute("SELECT stored_as FROM templates WHERE workspace = %s AND name = %s FOR UPDATE",
                               (workspace, record.name)).fetchone()
            conn.execute(
                f"INSERT INTO templates (workspace, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (workspace, name) DO UPDATE SET created_at = EXCLUDED.created_at, bytes = EXCLUDED.bytes, "
                "kernels = EXCLUDED.kernels, fresh_kernels = EXCLUDED.fresh_kernels, stored_as = EXCLUDED.stored_as",
                (workspace, record.name, record.created_at, record.bytes, json.dumps(fields["kernels"]),
                 json.dumps(fields["fresh_kernels"]), stored_as))
        return old[0] if old is not None else None

    def get(self, workspace: str, name: str) -> tuple[TemplateRecord, str]:
        """The template and its tree (TemplateNotFound)."""
        row = self._db.fetchone(f"SELECT {_COLUMNS} FROM templates WHERE workspace = %s AND name = %s",
                                (workspace, name))
        if row is None:
            raise TemplateNotFound(f"no template {name!r} in this workspace")
        return _record(row)

    def in_workspace(self, workspace: str) -> list[TemplateRecord]:
        rows = self._db.fetchall(f"SELECT {_COLUMNS} FROM templates WHERE workspace = %s ORDER BY name", (workspace,))
        return [_record(row)[0] for row in rows]

    def delete(self, workspace: str, name: str) -> str:
        """Remove the template; its tree (TemplateNotFound)."""
        row = self._db.fetchone("DELETE FROM templates WHERE workspace = %s AND name = %s RETURNING stored_as",
                                (workspace, name))
        if row is None:
            raise TemplateNotFound(f"no template {name!r} in this workspace")
        return row[0]

    def named(self, trees: list[str]) -> set[str]:
        """Those of `trees` a template still names."""
        if not trees:
            return set()
        return {row[0] for row in self._db.fetchall("SELECT stored_as FROM templates WHERE stored_as = ANY(%s)",
                                                    (trees,))}

    def stored_bytes(self, workspace: str) -> int:
        """What the workspace's templates take (its disk quota counts them)."""
        row = self._db.fetchone("SELECT COALESCE(SUM(bytes), 0) FROM templates WHERE workspace = %s", (workspace,))
        return int(row[0]) if row is not None else 0


class SharedTemplates:
    """The templates of a cluster's workspaces: rows in `catalog`, trees in `storage`, this node's copies of
    them under `trees` (see the module's docstring)."""

    def __init__(self, catalog: TemplateCatalog, storage: SessionStorage, trees: Path, node: str) -> None:
        self.catalog = catalog
        self.storage = storage
        self.trees = trees
        self.node = node
        self._lock = threading.Lock()
        self._in_use: dict[str, int] = {}
        """Copies sessions are being started from (or made into): never pruned meanwhile."""
        self._fetching: dict[str, threading.Lock] = {}

    def close(self) -> None:
        self.catalog.close()

    @contextlib.contextmanager
    def _using(self, tree: str) -> Iterator[Templates]:
        with self._lock:
            self._in_use[tree] = self._in_use.get(tree, 0) + 1
        try:
            yield Templates(self.trees / tree)
        finally:
            with self._lock:
                self._in_use[tree] -= 1
                if not self._in_use[tree]:
                    del self._in_use[tree]

    def publish(self, session: Session, owner: str, name: str, skip: frozenset[str]) -> TemplateRecord:
        tree = new_tree_id()
        with self._using(tree) as copy:
            record = copy.publish(session, name, skip=skip)
            self.storage.save(tree, copy.directory / name, generation=1, epoch=0, node=self.node)
            self.storage.forget(tree)  # (written once: nothing to remember for a next save)
        try:
            replaced = self.catalog.put(owner, record, tree)
        except BaseException:
            self.storage.remove(tree)
            raise
        if replaced is not None:
            self.storage.remove(replaced)
        self.prune()
        return record

    def get(self, owner: str, name: str) -> TemplateRecord:
        return self.catalog.get(owner, name)[0]

    def in_workspace(self, owner: str) -> list[TemplateRecord]:
        return self.catalog.in_workspace(owner)

    def delete(self, owner: str, name: str) -> None:
        self.storage.remove(self.catalog.delete(owner, name))
        self.prune()

    def start(self, owner: str, name: str, session: Session) -> TemplateRecord:
        """Make the new session `session` a copy of the template, from this node's copy of its tree."""
        record, tree = self.catalog.get(owner, name)
        with self._using(tree) as copy:
            with self._lock:
                fetching = self._fetching.setdefault(tree, threading.Lock())
            with fetching:  # one fetch of a tree at a time; the others wait for it
                if not (copy.directory / f"{name}.json").is_file():
                    self.storage.restore(tree, copy.directory / name, 1)
                    self.storage.forget(tree)
                    (copy.directory / f"{name}.json").write_text(json.dumps(asdict(record)))
            copy.start(name, session)
        return record

    def prune(self) -> None:
        """Delete this node's copies of the trees no template names any more."""
        if not self.trees.is_dir():
            return
        with self._lock:
            present = [p.name for p in self.trees.iterdir() if p.name.startswith("tpl-") and p.name not in self._in_use]
        named = self.catalog.named(present)
        for tree in present:
            if tree not in named:
                with self._lock:
                    if tree in self._in_use:
                        continue
                    self._fetching.pop(tree, None)
                discard_tree(self.trees / tree)

    def stored_bytes(self, owner: str) -> int:
        return self.catalog.stored_bytes(owner)
