"""`wasm-runner upload` and `download`: files and whole folders between here and a session.

A folder goes up as multipart requests of many files each (the API has no archive upload) and
comes down as one tar.gz archive (GET /v1/sessions/{id}/archive), extracted with tarfile's
`data` filter: no absolute names, no `..`, no links or devices, no setuid bits, whatever the
archive holds. Downloads land in a temporary sibling first and are renamed into place, so an
interrupted one never leaves a half-written file or folder under the name asked for. Nothing
existing is overwritten unless `--force` says so (files only).
"""

from __future__ import annotations

import argparse
import os
import posixpath
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import note, print_json
from wasm_runner_client.cli.status import LOCAL_ERROR, OK, REFUSED, CliError, guarded
from wasm_runner_client.errors import ConflictError
from wasm_runner_client.sync_client import Client
from wasm_runner_client.wire import WriteResult

BATCH_FILES = 100
"""Files per multipart request when a folder goes up (each is streamed from its own open file)."""
BATCH_BYTES = 64 * 1024 * 1024
"""Bytes per multipart request, so that one failed request costs little to redo."""


def _local_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative `/` path, file) for each regular file under `root`; links are skipped, never followed."""
    for directory, dirs, files in os.walk(root, followlinks=False):
        here = Path(directory)
        for name in sorted(dirs):
            if (here / name).is_symlink():
                note(f"skipped {here / name}: a symbolic link")
        dirs.sort()
        for name in sorted(files):
            path = here / name
            if path.is_symlink() or not path.is_file():
                note(f"skipped {path}: not a regular file")
                continue
            yield path.relative_to(root).as_posix(), path


def _batches(files: Iterator[tuple[str, Path]]) -> Iterator[list[tuple[str, Path]]]:
    batch: list[tuple[str, Path]] = []
    total = 0
    for rel, path in files:
        length = path.stat().st_size
        if batch and (len(batch) >= BATCH_FILES or total + length > BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append((rel, path))
        total += length
    if batch:
        yield batch


def upload_folder(client: Client, session: str, root: Path, remote: str) -> list[WriteResult]:
    """Every regular file under `root` to the folder `remote` of the session, in batches."""
    written: list[WriteResult] = []
    for batch in _batches(_local_files(root)):
        with ExitStack() as opened:
            parts: dict[str, bytes | str | IO[bytes]] = {rel: opened.enter_context(path.open("rb"))
                                                        for rel, path in batch}
            written += client.upload(session, parts, dir=remote).files
    return written


def _remote_name(local: Path, remote: str | None) -> str:
    """Where LOCAL goes: REMOTE, or LOCAL's name; a REMOTE ending in `/` is a folder to put it in."""
    name = local.resolve().name
    if not remote:
        return name
    return remote + name if remote.endswith("/") else remote


@guarded
def upload_command(args: argparse.Namespace) -> int:
    local = Path(args.local)
    if not local.exists():
        raise CliError(f"no such file or folder: {local}", LOCAL_ERROR)
    remote = _remote_name(local, args.remote)
    with connect(args) as client:
        if local.is_dir():
            written = upload_folder(client, args.session, local, remote)
        else:
            try:
                written = [client.upload_file(args.session, local, remote)]
            except ConflictError as exc:
                if exc.code != "is_a_directory":
                    raise
                raise CliError(f"{exc.message} ({exc.code})", REFUSED,
                               hint=f"end REMOTE with / to upload into it: {remote}/") from exc
    if args.json:
        print_json(written)
    elif not args.quiet:
        total = sum(w.size for w in written)
        print(f"uploaded {len(written)} file{'s' if len(written) != 1 else ''} ({total} bytes) to {remote}")
    return OK


def _target(remote: str, local: str | None, session: str) -> Path:
    """Where REMOTE lands: LOCAL, inside LOCAL when it is a folder, else REMOTE's name here."""
    name = posixpath.basename(remote.strip("/")) or session
    if local is None:
        return Path(name)
    path = Path(local)
    return path / name if path.is_dir() else path


def download_file(client: Client, session: str, remote: str, target: Path) -> int:
    """Write REMOTE to a temporary sibling of `target`, then rename it into place."""
    fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            written = client.download(session, remote, file)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return written


def download_folder(client: Client, session: str, remote: str, target: Path) -> int:
    """Fetch REMOTE as a tar.gz archive, extract it (data filter) into a sibling renamed to `target`; the
    number of files."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        archive = staging / "archive.tar.gz"
        client.download_archive(session, archive, remote, format="tar.gz")
        tree = staging / "tree"
        tree.mkdir()
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            tar.extractall(tree, filter="data")
        if target.exists():  # created meanwhile: never replace it
            raise CliError(f"{target} appeared while downloading; nothing was written", LOCAL_ERROR)
        tree.rename(target)
    except tarfile.TarError as exc:
        raise CliError(f"the archive of {remote or '/'} could not be extracted: {exc}", LOCAL_ERROR) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sum(1 for m in members if m.isfile())


@guarded
def download_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.local == "-":
            sys.stdout.flush()
            client.download(args.session, args.remote, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return OK
        target = _target(args.remote, args.local, args.session)
        if not target.parent.is_dir():
            raise CliError(f"no such folder: {target.parent}", LOCAL_ERROR)
        if target.exists() and (target.is_dir() or not args.force):
            raise CliError(f"{target} exists; nothing was written", LOCAL_ERROR,
                           hint="name another LOCAL" + ("" if target.is_dir() else ", or pass --force to replace it"))
        whole = args.remote.strip("/") in ("", ".")
        try:
            if whole:  # the workspace itself: a folder, whose name is the session's
                raise ConflictError(409, "is_a_directory", "the workspace is a folder")
            written = download_file(client, args.session, args.remote, target)
            kind = "file"
        except ConflictError as exc:
            if exc.code != "is_a_directory":
                raise
            written = download_folder(client, args.session, "" if whole else args.remote, target)
            kind = "folder"
    if args.json:
        print_json({"path": str(target), "type": kind, "files" if kind == "folder" else "bytes": written})
    elif not args.quiet:
        print(f"downloaded {kind} {args.remote or '/'} to {target}"
              + (f" ({written} file{'s' if written != 1 else ''})" if kind == "folder" else f" ({written} bytes)"))
    return OK
