"""File operations on a session workspace, confined to it.

Every operation walks its path one component at a time from a descriptor of the
workspace root, opening each directory with O_NOFOLLOW: a symlink anywhere on the
path (a guest can create links pointing anywhere) is refused, never followed, and
`..` is refused before anything is opened. Writes are atomic (a temporary file in
the same directory, then rename), so a reader or a running guest never sees half a file.

This module is the one implementation of the file tools (read, write, edit, patch,
list, glob, grep, archive) used by the HTTP service and the MCP server; it knows
nothing about either. Beside it: the paths it takes (`relpaths`), its errors
(`file_errors`), the budget its loops check (`budget`), glob patterns (`globs`), and
edits and diffs applied to a text (`text_patches`).
"""

from __future__ import annotations

import errno
import io
import math
import os
import re
import secrets
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import regex

from wasm_runner.workspace.budget import Budget
from wasm_runner.workspace.file_errors import (
    DirectoryNotEmptyError,
    EditError,
    EditNotFoundError,
    EditNotUniqueError,
    FileOpError,
    FileTooLargeError,
    InvalidPathError,
    InvalidPatternError,
    IsDirectoryError,
    NoSuchFileError,
    NotDirectoryError,
    NotRegularFileError,
    NotTextError,
    PathEscapeError,
)
from wasm_runner.workspace.globs import Glob, has_magic, unescape
from wasm_runner.workspace.layout import remove_tree
from wasm_runner.workspace.relpaths import join, split_path
from wasm_runner.workspace.text_patches import apply_hunks, near_miss_hint, occurrence_lines, parse_unified_diff

EntryType = Literal["file", "directory", "symlink", "other"]
ArchiveFormat = Literal["zip", "tar.gz"]

CHUNK = 256 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO never hangs us


# -- results -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str
    """Relative to the workspace root, `/`-separated; "" is the root."""
    type: EntryType
    size: int
    mtime: float
    mode: int


@dataclass(frozen=True, slots=True)
class Listing:
    entries: list[FileInfo]
    truncated: bool


@dataclass(frozen=True, slots=True)
class WriteResult:
    info: FileInfo
    created: bool


@dataclass(frozen=True, slots=True)
class EditResult:
    info: FileInfo
    replacements: int = 0
    hunks: int = 0


@dataclass(frozen=True, slots=True)
class TextEdit:
    old_text: str
    new_text: str
    replace_all: bool = False


@dataclass(frozen=True, slots=True)
class GrepMatch:
    path: str
    line: int
    text: str


@dataclass(slots=True)
class GrepResult:
    matches: list[GrepMatch] = field(default_factory=list)
    files_searched: int = 0
    truncated: bool = False
    """True when the match cap, the scan cap or the time budget stopped the search early."""
    timed_out: bool = False


def _type_of(mode: int) -> EntryType:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _info(path: str, st: os.stat_result) -> FileInfo:
    return FileInfo(path=path, type=_type_of(st.st_mode), size=st.st_size if stat.S_ISREG(st.st_mode) else 0,
                    mtime=st.st_mtime, mode=stat.S_IMODE(st.st_mode))


class _Fd:
    """A directory descriptor that closes itself."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


# -- the workspace -------------------------------------------------------------------


class WorkspaceFiles:
    """File operations confined to the directory `root` (a session's /workspace on the host)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # -- descriptors ------------------------------------------------------------------

    def _root_fd(self, path: str) -> int:
        try:
            return os.open(self.root, _DIR_FLAGS)
        except FileNotFoundError:
            raise NoSuchFileError(path, f"{path or 'the workspace'} does not exist (nothing has been written yet)") from None

    def _open_dir(self, parts: Sequence[str], path: str, *, create: bool = False) -> int:
        """A descriptor of the directory `parts`, every component opened without following links."""
        fd = self._root_fd(path)
        try:
            for i, part in enumerate(parts):
                try:
                    new = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise NoSuchFileError(path, f"{join(parts[:i + 1])!r} does not exist") from None
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                    new = self._reopen_dir(fd, part, parts[: i + 1], path)
                except OSError as exc:
                    new = self._dir_error(fd, part, parts[: i + 1], path, exc)
                os.close(fd)
                fd = new
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _reopen_dir(self, fd: int, part: str, sofar: Sequence[str], path: str) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            return self._dir_error(fd, part, sofar, path, exc)

    def _dir_error(self, fd: int, part: str, sofar: Sequence[str], path: str, exc: OSError) -> int:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except OSError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise PathEscapeError(path, f"{join(sofar)!r} is a symbolic link; links are never followed",
                                      "address the link's target by its own workspace path") from None
            raise NotDirectoryError(path, f"{join(sofar)!r} is not a directory") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidPathError(path, "a path component is too long") from None
        raise exc

    def _lstat_in(self, dfd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    # -- inspection -------------------------------------------------------------------

    def exists(self) -> bool:
        return self.root.is_dir()

    def stat(self, path: str) -> FileInfo:
        parts = split_path(path)
        if not parts:
            with _Fd(self._root_fd(path)) as fd:
                return _info("", os.fstat(fd))
        with _Fd(self._open_dir(parts[:-1], path)) as dfd:
            st = self._lstat_in(dfd, parts[-1])
        if st is None:
            raise NoSuchFileError(path, f"{join(parts)!r} does not exist")
        return _info(join(parts), st)

    # -- reading ----------------------------------------------------------------------

    def open(self, path: str) -> OpenFile:
        """Open a regular file for reading (the caller closes it, or uses `with`)."""
        parts = split_path(path)
        if not parts:
            raise IsDirectoryError(path, "the workspace root is a directory")
        name = join(parts)
        with _Fd(self._open_dir(parts[:-1], path)) as dfd:
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dfd)
            except FileNotFoundError:
                raise NoSuchFileError(path, f"{name!r} does not exist") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise PathEscapeError(path, f"{name!r} is a symbolic link; links are never followed") from None
                if exc.errno == errno.ENXIO:
                    raise NotRegularFileError(path, f"{name!r} is not a regular file") from None
                raise
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsDirectoryError(path, f"{name!r} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise NotRegularFileError(path, f"{name!r} is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return OpenFile(fd, _info(name, st))

    def read_bytes(self, path: str, start: int = 0, end: int | None = None, *, max_bytes: int | None = None) -> bytes:
        """Bytes [start, end) of a file (end exclusive, None = to the end)."""
        with self.open(path) as handle:
            size = handle.info.size
            stop = size if end is None else min(end, size)
            if max_bytes is not None and stop - start > max_bytes:
                raise FileTooLargeError(handle.info.path, max_bytes,
                                        hint="read it in byte ranges")
            return handle.pread(start, max(stop - start, 0))

    def read_text(self, path: str, *, max_bytes: int | None = None) -> str:
        data = self.read_bytes(path, max_bytes=max_bytes)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise NotTextError(path, f"{path!r} is not UTF-8 text") from None

    # -- writing ----------------------------------------------------------------------

    def writer(self, path: str, *, max_bytes: int | None = None, make_parents: bool = True,
               reserve: Callable[[int], None] | None = None) -> AtomicWriter:
        """An atomic writer: write chunks, then commit (rename into place) or abort.

        `reserve(n)` is called before each chunk of n bytes is written; what it raises aborts
        the write (a quota reservation refusing the bytes)."""
        parts = split_path(path)
        if not parts:
            raise IsDirectoryError(path, "cannot write to the workspace root")
        dfd = self._open_dir(parts[:-1], path, create=make_parents)
        try:
            existing = self._lstat_in(dfd, parts[-1])
            if existing is not None and stat.S_ISDIR(existing.st_mode):
                raise IsDirectoryError(path, f"{join(parts)!r} is a directory")
            if existing is not None and stat.S_ISLNK(existing.st_mode):
                raise PathEscapeError(path, f"{join(parts)!r} is a symbolic link; links are never written through",
                                      "delete the link first to put a file in its place")
            mode = stat.S_IMODE(existing.st_mode) if existing is not None and stat.S_ISREG(existing.st_mode) else 0o644
            return AtomicWriter(dfd, parts[-1], join(parts), mode, existing is None, max_bytes, reserve)
        except BaseException:
            os.close(dfd)
            raise

    def write_bytes(self, path: str, data: bytes, *, max_bytes: int | None = None, make_parents: bool = True,
                    reserve: Callable[[int], None] | None = None) -> WriteResult:
        with self.writer(path, max_bytes=max_bytes, make_parents=make_parents, reserve=reserve) as out:
            out.write(data)
            return out.commit()

    def write_text(self, path: str, text: str, **kwargs: Any) -> WriteResult:
        return self.write_bytes(path, text.encode("utf-8"), **kwargs)

    def mkdir(self, path: str) -> FileInfo:
        parts = split_path(path)
        with _Fd(self._open_dir(parts, path, create=True)) as fd:
            return _info(join(parts), os.fstat(fd))

    def delete(self, path: str, *, recursive: bool = False) -> FileInfo:
        """Remove a file, a link (never its target) or a directory (recursive for a non-empty one)."""
        parts = split_path(path)
        if not parts:
            raise InvalidPathError(path, "cannot delete the workspace root", "delete its entries instead")
        name = join(parts)
        with _Fd(self._open_dir(parts[:-1], path)) as dfd:
            st = self._lstat_in(dfd, parts[-1])
            if st is None:
                raise NoSuchFileError(path, f"{name!r} does not exist")
            if stat.S_ISDIR(st.st_mode):
                if recursive:
                    remove_tree(parts[-1], dir_fd=dfd)  # descriptor-based, iterative: never follows links
                else:
                    try:
                        os.rmdir(parts[-1], dir_fd=dfd)
                    except OSError as exc:
                        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                            raise DirectoryNotEmptyError(path, f"{name!r} is a directory that is not empty",
                                                         "pass recursive=true to delete it with its contents") from None
                        raise
            else:
                os.unlink(parts[-1], dir_fd=dfd)
        return _info(name, st)

    # -- editing ----------------------------------------------------------------------

    def edit(self, path: str, edits: Sequence[TextEdit], *, max_bytes: int | None = None,
             max_result_bytes: int | None = None, reserve: Callable[[int], None] | None = None,
             budget: Budget | None = None) -> EditResult:
        """Apply exact search-and-replace edits in order, all or none (one atomic write).

        Finding and counting are linear in the file's size; `budget` bounds the whole edit. A
        result over `max_result_bytes` is refused before it is built: each edit's size is its
        occurrences times the size change, known before replacing."""
        if not edits:
            raise EditError(path, "no edits given")
        budget = budget if budget is not None else Budget()
        text = self.read_text(path, max_bytes=max_bytes)
        size = len(text.encode("utf-8"))
        total = 0
        for number, edit in enumerate(edits, 1):
            budget.check("the edit", path, "send fewer edits, or edit a smaller file")
            which = f"edit {number}: " if len(edits) > 1 else ""
            if edit.old_text == "":
                raise EditError(path, f"{which}old_text is empty", "to write a whole file use write (PUT)")
            count = text.count(edit.old_text)
            if count == 0:
                raise EditNotFoundError(path, f"{which}old_text was not found in {path!r}",
                                        near_miss_hint(text, edit.old_text, budget))
            if count > 1 and not edit.replace_all:
                lines = occurrence_lines(text, edit.old_text, budget)
                shown = ", ".join(map(str, lines)) + ("…" if count > len(lines) else "")
                raise EditNotUniqueError(
                    path, f"{which}old_text occurs {count} times in {path!r} (lines {shown})", count, lines,
                    "add surrounding lines to old_text so it matches once, or set replace_all")
            size += count * (len(edit.new_text.encode("utf-8")) - len(edit.old_text.encode("utf-8")))
            if max_result_bytes is not None and size > max_result_bytes:
                raise FileTooLargeError(path, max_result_bytes, f"{which}the edits would make {path!r} {size} bytes, "
                                        f"over the {max_result_bytes}-byte limit",
                                        "replace fewer occurrences, or write the file whole with PUT")
            text = text.replace(edit.old_text, edit.new_text)
            total += count
        result = self.write_text(path, text, make_parents=False, max_bytes=max_result_bytes, reserve=reserve)
        return EditResult(info=result.info, replacements=total)

    def apply_patch(self, path: str, diff: str, *, max_bytes: int | None = None,
                    max_result_bytes: int | None = None, reserve: Callable[[int], None] | None = None,
                    budget: Budget | None = None) -> EditResult:
        """Apply a unified diff to one file (headers optional; hunks may sit at shifted lines).

        `budget` bounds the search for hunks that moved."""
        budget = budget if budget is not None else Budget()
        hunks = parse_unified_diff(diff)
        try:
            original = self.read_text(path, max_bytes=max_bytes)
        except NoSuchFileError:
            if not all(not h.old for h in hunks):
                raise
            original = ""
        patched = apply_hunks(original, hunks, path, budget)  # at most the file plus the diff's added lines
        result = self.write_text(path, patched, max_bytes=max_result_bytes, reserve=reserve)
        return EditResult(info=result.info, hunks=len(hunks))

    # -- listing, glob, grep --------------------------------------------------------------

    def walk(self, path: str = "", *, max_depth: int | None = None, max_entries: int | None = None,
             ) -> Iterator[tuple[str, os.stat_result]]:
        """(relative path, lstat) of everything under `path`, depth first in name order; links not followed."""
        parts = split_path(path)
        try:
            top = self._open_dir(parts, path)
        except NoSuchFileError:
            if parts:
                raise
            return
        prefix = join(parts) + "/" if parts else ""
        stack: list[tuple[int, str, int, list[str]]] = []
        try:
            stack.append((top, prefix, 1, sorted(os.listdir(top), reverse=True)))
            seen = 0
            while stack:
                fd, base, depth, names = stack[-1]
                if not names:
                    os.close(fd)
                    stack.pop()
                    continue
                name = names.pop()
                st = self._lstat_in(fd, name)
                if st is None:
                    continue
                seen += 1
                if max_entries is not None and seen > max_entries:
                    raise _ScanCapReached()
                yield base + name, st
                if stat.S_ISDIR(st.st_mode) and (max_depth is None or depth < max_depth):
                    try:
                        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        continue
                    try:
                        children = sorted(os.listdir(sub), reverse=True)
                    except OSError:
                        os.close(sub)
                        continue
                    stack.append((sub, base + name + "/", depth + 1, children))
        finally:
            for fd, *_ in stack:
                os.close(fd)

    def list(self, path: str = "", *, recursive: bool = False, limit: int = 1000) -> Listing:
        """Entries of a directory (or the one entry of a file) with sizes and modification times."""
        parts = split_path(path)
        if parts:
            info = self.stat(path)
            if info.type != "directory":
                return Listing([info], False)
        entries: list[FileInfo] = []
        truncated = False
        try:
            for rel, st in self.walk(path, max_depth=None if recursive else 1, max_entries=limit * 10 + 1000):
                if len(entries) >= limit:
                    truncated = True
                    break
                entries.append(_info(rel, st))
        except _ScanCapReached:
            truncated = True
        return Listing(entries, truncated)

    def glob(self, pattern: str, *, limit: int = 1000, max_scan: int = 200_000, budget: Budget | None = None,
             ) -> Listing:
        """Entries matching a glob (see `Glob`): `*` and `?` stay within one component, `**` spans
        any depth, `[abc]` and `{a,b}` as usual. Dotfiles match like any other name."""
        budget = budget if budget is not None else Budget()
        matcher = Glob(pattern)
        parts = matcher.parts
        static: list[str] = []
        for part in parts:
            if has_magic(part):
                break
            static.append(unescape(part))
        if len(static) == len(parts):  # no magic at all: a plain path
            try:
                return Listing([self.stat(join(static))], False)
            except (NoSuchFileError, NotDirectoryError):
                return Listing([], False)
        depth = None if any(p == "**" or "**" in p for p in parts) else len(parts) - len(static)
        matches: list[FileInfo] = []
        truncated = False
        try:
            for rel, st in self.walk(join(static), max_depth=depth, max_entries=max_scan):
                budget.check("the glob", pattern, "narrow the pattern, or start it with a fixed directory")
                if matcher.matches(rel):
                    if len(matches) >= limit:
                        truncated = True
                        break
                    matches.append(_info(rel, st))
        except (NoSuchFileError, NotDirectoryError):
            return Listing([], False)
        except _ScanCapReached:
            truncated = True
        return Listing(matches, truncated)

    def grep(
        self,
        pattern: str,
        path: str = "",
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        fixed_string: bool = False,
        max_matches: int = 100,
        max_line_chars: int = 500,
        max_file_bytes: int = 8 * 1024 * 1024,
        time_budget_s: float = 5.0,
        max_files: int = 50_000,
        budget: Budget | None = None,
    ) -> GrepResult:
        """Lines matching a regular expression (Python syntax), with 1-based line numbers.

        Binary files (a NUL in the first 8 KiB) and files over `max_file_bytes` are skipped;
        the search stops at `max_matches`, `max_files` or its time budget (`budget`, else
        `time_budget_s`) and says so. A pattern that backtracks catastrophically only costs its
        time budget; a cancelled budget stops the search with OperationCancelledError.
        """
        flags = regex.IGNORECASE if ignore_case else 0
        try:
            compiled = regex.compile(regex.escape(pattern) if fixed_string else pattern, flags | regex.V0)
        except (regex.error, ValueError, OverflowError) as exc:
            raise InvalidPatternError(pattern, f"invalid regular expression: {exc}") from None
        name_filter = _grep_name_filter(glob) if glob else None
        result = GrepResult()
        budget = budget if budget is not None else Budget(time_budget_s)
        parts = split_path(path)
        info = self.stat(path) if parts else None
        if info is not None and info.type == "symlink":
            raise PathEscapeError(path, f"{info.path!r} is a symbolic link; links are never followed")
        if info is not None and info.type == "file":
            candidates: Iterator[tuple[str, os.stat_result | None]] = iter([(info.path, None)])
        elif info is not None and info.type != "directory":
            return result
        else:
            candidates = self.walk(path, max_entries=max_files * 4)
        try:
            for rel, st in candidates:
                if budget.cancelled:
                    budget.check("the search", path)
                if budget.remaining() <= 0:
                    result.truncated = result.timed_out = True
                    return result
                if st is not None and not stat.S_ISREG(st.st_mode):
                    continue
                if name_filter is not None and not name_filter(rel):
                    continue
                if st is not None and st.st_size > max_file_bytes:
                    continue
                if result.files_searched >= max_files:
                    result.truncated = True
                    break
                try:
                    data = self.read_bytes(rel, max_bytes=max_file_bytes)
                except FileOpError:
                    continue
                if b"\x00" in data[:8192]:
                    continue
                result.files_searched += 1
                text = data.decode("utf-8", errors="replace")
                for number, line in enumerate(text.split("\n"), 1):
                    if budget.cancelled:
                        budget.check("the search", path)
                    remaining = budget.remaining()
                    if remaining <= 0:
                        result.truncated = result.timed_out = True
                        return result
                    try:
                        found = compiled.search(line, timeout=remaining if remaining != math.inf else None)
                    except TimeoutError:
                        result.truncated = result.timed_out = True
                        return result
                    if found is None:
                        continue
                    if len(result.matches) >= max_matches:
                        result.truncated = True
                        return result
                    shown = line.rstrip("\r")
                    if len(shown) > max_line_chars:
                        shown = shown[:max_line_chars] + "…"
                    result.matches.append(GrepMatch(rel, number, shown))
        except _ScanCapReached:
            result.truncated = True
        return result

    # -- archives ---------------------------------------------------------------------

    def archive(self, path: str = "", fmt: ArchiveFormat = "zip", *, budget: Budget | None = None,
                ) -> Iterator[bytes]:
        """Stream a folder as a zip or tar.gz archive (chunks as they are produced).

        Names inside are relative to `path`, made safe to extract anywhere (`archive_name`);
        modes keep only the permission bits (no setuid, setgid or sticky bit); symbolic links
        and special files are left out (never followed). The folder is checked before the
        first chunk is produced. `budget` is checked while each chunk is produced (the caller
        restarts it per chunk: a large folder streams for as long as the client reads).
        """
        parts = split_path(path)
        if parts:
            info = self.stat(path)
            if info.type == "symlink":
                raise PathEscapeError(path, f"{info.path!r} is a symbolic link; links are never followed")
            if info.type != "directory":
                raise NotDirectoryError(path, f"{join(parts)!r} is not a directory", "download a file with a plain read")
        elif not self.exists():
            raise NoSuchFileError(path, "the workspace does not exist yet (nothing has been written)")
        budget = budget if budget is not None else Budget()
        if fmt == "zip":
            return self._zip(parts, budget)
        if fmt == "tar.gz":
            return self._targz(parts, budget)
        raise ValueError(f"unknown archive format {fmt!r} (zip or tar.gz)")

    def _archive_entries(self, parts: tuple[str, ...], budget: Budget) -> Iterator[tuple[str, str, os.stat_result]]:
        strip = len(join(parts)) + 1 if parts else 0
        for rel, st in self.walk(join(parts)):
            budget.check("the archive", join(parts), "archive a smaller folder")
            if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                yield rel, archive_name(rel[strip:]), st

    def _zip(self, parts: tuple[str, ...], budget: Budget) -> Iterator[bytes]:
        sink = _Sink()
        with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            for rel, name, st in self._archive_entries(parts, budget):
                stamp = time.gmtime(max(st.st_mtime, 315532800))[:6]  # zip dates start in 1980
                if stat.S_ISDIR(st.st_mode):
                    zi = zipfile.ZipInfo(name + "/", stamp)
                    zi.external_attr = (0o40755 << 16) | 0x10
                    zf.writestr(zi, b"")
                else:
                    zi = zipfile.ZipInfo(name, stamp)
                    zi.external_attr = (stat.S_IFREG | archive_mode(st.st_mode)) << 16
                    zi.compress_type = zipfile.ZIP_DEFLATED
                    try:
                        handle = self.open(rel)
                    except FileOpError:
                        continue
                    with handle, zf.open(zi, "w", force_zip64=st.st_size >= 2**31) as out:
                        for chunk in handle.chunks():
                            budget.check("the archive", rel, "archive a smaller folder")
                            out.write(chunk)
                            if sink.size >= CHUNK:
                                yield sink.drain()
                if sink.size >= CHUNK:
                    yield sink.drain()
        rest = sink.drain()
        if rest:
            yield rest

    def _targz(self, parts: tuple[str, ...], budget: Budget) -> Iterator[bytes]:
        gz = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip framing
        pending: list[bytes] = []
        size = 0

        def emit(data: bytes) -> None:
            nonlocal size
            out = gz.compress(data)
            if out:
                pending.append(out)
                size += len(out)

        def drain() -> bytes:
            nonlocal size
            data = b"".join(pending)
            pending.clear()
            size = 0
            return data

        written = 0
        for rel, name, st in self._archive_entries(parts, budget):
            info = tarfile.TarInfo(name)
            info.mtime = int(st.st_mtime)
            info.mode = archive_mode(st.st_mode)
            info.uname = info.gname = "sandbox"
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
                emit(header)
                written += len(header)
            else:
                try:
                    handle = self.open(rel)
                except FileOpError:
                    continue
                with handle:
                    info.size = handle.info.size  # what we will send, even if the file grows meanwhile
                    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
                    emit(header)
                    written += len(header)
                    sent = 0
                    for chunk in handle.chunks():
                        budget.check("the archive", rel, "archive a smaller folder")
                        chunk = chunk[: info.size - sent]
                        if not chunk:
                            break
                        emit(chunk)
                        sent += len(chunk)
                        if size >= CHUNK:
                            yield drain()
                    if sent < info.size:  # the file shrank: pad to the size promised
                        emit(b"\0" * (info.size - sent))
                    written += info.size
                    pad = -info.size % tarfile.BLOCKSIZE
                    emit(b"\0" * pad)
                    written += pad
            if size >= CHUNK:
                yield drain()
        trailer = 2 * tarfile.BLOCKSIZE
        trailer += -(written + trailer) % tarfile.RECORDSIZE
        emit(b"\0" * trailer)
        pending.append(gz.flush())
        yield drain()


_NOT_PORTABLE = re.compile(r"[\\:]")


def archive_name(rel: str) -> str:
    """An entry name that extracts inside the target directory on any system.

    Workspace names never hold `/`, `..` or an absolute start, but may hold what other
    systems read as a separator or a drive (`..\\..\\x`, `C:`): each `\\` and `:` is
    stored as `_`, and a component Windows would trim to `.`, `..` or nothing (only dots
    and spaces) gets a leading `_`.
    """
    out = []
    for part in rel.split("/"):
        part = _NOT_PORTABLE.sub("_", part)
        if part.strip(". ") == "":
            part = "_" + part
        out.append(part)
    return "/".join(out)


def archive_mode(mode: int) -> int:
    """The permission bits an archive entry keeps: never setuid, setgid or sticky."""
    return stat.S_IMODE(mode) & 0o777


class OpenFile:
    """A regular file opened for reading (by descriptor, so later renames do not affect it)."""

    def __init__(self, fd: int, info: FileInfo) -> None:
        self.fd = fd
        self.info = info

    def pread(self, offset: int, length: int) -> bytes:
        out = bytearray()
        while length > 0:
            chunk = os.pread(self.fd, min(length, CHUNK), offset)
            if not chunk:
                break
            out += chunk
            offset += len(chunk)
            length -= len(chunk)
        return bytes(out)

    def chunks(self, start: int = 0, end: int | None = None, size: int = CHUNK) -> Iterator[bytes]:
        """Bytes [start, end) in chunks of at most `size`."""
        offset = start
        stop = self.info.size if end is None else end
        while offset < stop:
            chunk = os.pread(self.fd, min(size, stop - offset), offset)
            if not chunk:
                return
            offset += len(chunk)
            yield chunk

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OpenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class AtomicWriter:
    """Writes into a temporary file beside the target; `commit` renames it into place."""

    def __init__(self, dir_fd: int, name: str, path: str, mode: int, creating: bool, max_bytes: int | None,
                 reserve: Callable[[int], None] | None = None) -> None:
        self._dir_fd = dir_fd
        self._reserve = reserve
        self._name = name
        self.path = path
        self._creating = creating
        self.max_bytes = max_bytes
        self.size = 0
        self._tmp = f".wr-{secrets.token_hex(6)}.tmp"
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                           mode, dir_fd=dir_fd)
        os.fchmod(self._fd, mode)
        self._done = False

    def write(self, data: bytes) -> None:
        if self._done:
            raise ValueError("the writer is closed")
        if self.max_bytes is not None and self.size + len(data) > self.max_bytes:
            self.abort()
            raise FileTooLargeError(self.path, self.max_bytes)
        if self._reserve is not None and data:
            try:
                self._reserve(len(data))
            except BaseException:
                self.abort()
                raise
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.size += len(data)

    def commit(self) -> WriteResult:
        if self._done:
            raise ValueError("the writer is closed")
        try:
            st = os.fstat(self._fd)
            os.close(self._fd)
            self._fd = -1
            try:
                os.rename(self._tmp, self._name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise IsDirectoryError(self.path, f"{self.path!r} is a directory") from None
                raise
            return WriteResult(_info(self.path, st), self._creating)
        except BaseException:
            self.abort()
            raise
        finally:
            self._finish()

    def abort(self) -> None:
        if self._done:
            return
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self._tmp, dir_fd=self._dir_fd)
        except FileNotFoundError:
            pass
        self._finish()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            os.close(self._dir_fd)

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()


class _ScanCapReached(Exception):
    pass


class _Sink(io.RawIOBase):
    """An unseekable byte sink that zipfile streams into (it then writes data descriptors)."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []
        self.size = 0
        self._written = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data: Any) -> int:
        data = bytes(data)
        self._parts.append(data)
        self.size += len(data)
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        pass

    def drain(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        self.size = 0
        return data


def _grep_name_filter(pattern: str) -> Callable[[str], bool]:
    compiled = Glob(pattern, what="glob")
    if len(compiled.parts) > 1:
        return compiled.matches
    return lambda rel: compiled.matches(rel.rsplit("/", 1)[-1])


