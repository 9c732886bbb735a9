"""Wheels: which the WebAssembly guest can load, and unpacking one on the host without running it.

Nothing of a package runs on the host: a wheel is a zip of files placed as they are (no build
backend, no install scripts, no `.pth` processing by the host). Every entry name is checked before
anything is written: absolute paths, `..`, links and device files are refused, as are trees larger
than the settings allow.
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from wasm_runner.errors import WasmRunnerError

NATIVE_HINT = ("the WebAssembly Python runtime loads pure-Python wheels only: run code that needs it with the "
               "native provider (profile `python-data`, or a native profile with `pip install` in the session)")
SDIST_HINT = ("building a source distribution runs the package's own code, which the host never does: use a "
              "version with a py3-none-any wheel, or build it inside the native sandbox (profile `python-data`)")

READ_ONLY_FILE = 0o444
READ_ONLY_DIR = 0o555


class WheelRefused(WasmRunnerError):
    """A wheel that cannot go into the guest's package directory; `kind` is a PackageError kind."""

    def __init__(self, kind: str, message: str, hint: str | None = None, package: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.hint, self.package = kind, message, hint, package


def pure_python(tags: frozenset[Tag]) -> bool:
    """A wheel for any platform and ABI, for Python 3 (what CPython 3.14 in WASI can import)."""
    return any(t.abi == "none" and t.platform == "any" and t.interpreter.startswith(("py3", "py2.py3", "cp3"))
               for t in tags)


def check_filename(filename: str, package: str) -> None:
    """Refuse what the guest cannot load, naming the package and where to run it instead."""
    if not filename.endswith(".whl"):
        raise WheelRefused("sdist_only", f"{package}: only a source distribution ({filename}) was found", SDIST_HINT,
                           package)
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise WheelRefused("unsafe_wheel", f"{package}: {exc}") from None
    if not pure_python(tags):
        tag = sorted(str(t) for t in tags)[0]
        raise WheelRefused("native_code", f"{package} ships native code ({filename}, tag {tag})", NATIVE_HINT, package)


MAX_METADATA_BYTES = 4 * 1024**2


def check_metadata(wheel: Path, name: str, version: str) -> None:
    """The wheel's own `*.dist-info/METADATA` names `name` and `version` (what was pinned), or
    WheelRefused: an index or a lock cannot pass one distribution off as another."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            found = [info for info in zf.infolist() if len(PurePosixPath(info.filename).parts) == 2
                     and info.filename.endswith(".dist-info/METADATA")]
            if len(found) != 1:
                raise WheelRefused("unsafe_wheel", f"the wheel for {name} {version} has {len(found)} "
                                   "*.dist-info/METADATA files, not one", package=name)
            if found[0].file_size > MAX_METADATA_BYTES:
                raise WheelRefused("unsafe_wheel", f"the wheel for {name} {version} has an oversized METADATA",
                                   package=name)
            text = zf.read(found[0]).decode("utf-8", "replace")
    except (zipfile.BadZipFile, OSError, ValueError):
        raise WheelRefused("unsafe_wheel", f"the file for {name} {version} is not a readable wheel",
                           package=name) from None
    headers = email.parser.HeaderParser().parsestr(text)
    own_name, own_version = headers.get("Name") or "", headers.get("Version") or ""
    try:
        same = canonicalize_name(own_name) == canonicalize_name(name) and Version(own_version) == Version(version)
    except InvalidVersion:
        same = False
    if not same:
        raise WheelRefused("unsafe_wheel", f"the wheel pinned as {name} {version} says it is {own_name[:100]!r} "
                           f"{own_version[:100]!r} (its METADATA)", "install the package by name, or replay a "
                           "lock as a session gave it", name)


@dataclass(frozen=True)
class UnpackedTree:
    files: tuple[str, ...]
    """Relative paths, in the order written."""
    size: int


def _safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if (not name or name.startswith("/") or "\\" in name or "\0" in name or path.is_absolute()
            or any(part in ("..", "") for part in path.parts) or ":" in path.parts[0]):
        raise WheelRefused("unsafe_wheel", f"the wheel has an entry outside its tree: {name!r}")
    return path


def _placement(path: PurePosixPath) -> PurePosixPath | None:
    """Where an entry goes in site-packages; None to leave it out. `*.data/purelib|platlib` go to the
    root; `*.data/scripts|headers|data` are not for an import path and are dropped."""
    top = path.parts[0]
    if top.endswith(".data") and len(path.parts) > 1:
        if path.parts[1] in ("purelib", "platlib") and len(path.parts) > 2:
            return PurePosixPath(*path.parts[2:])
        return None
    return path


def unpack(wheel: Path, target: Path, max_bytes: int) -> UnpackedTree:
    """Write the wheel's importable files below `target` (a new directory), read-only."""
    written: list[str] = []
    total = 0
    target.mkdir(mode=0o755)
    with zipfile.ZipFile(wheel) as zf:
        entries = zf.infolist()
        for info in entries:  # every name checked before anything is written
            _safe_name(info.filename.rstrip("/") if info.is_dir() else info.filename)
            kind = stat.S_IFMT(info.external_attr >> 16)  # zip tools that store no type leave it 0
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise WheelRefused("unsafe_wheel", f"the wheel has a link or special file: {info.filename!r}")
            total += info.file_size
            if total > max_bytes:
                raise WheelRefused("too_large", f"{wheel.name} unpacks to more than {max_bytes} bytes")
        for info in entries:
            if info.is_dir():
                continue
            placed = _placement(_safe_name(info.filename))
            if placed is None:
                continue
            destination = target.joinpath(*placed.parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as out, zf.open(info) as source:
                left = info.file_size
                while chunk := source.read(min(1 << 20, left + 1)):
                    left -= len(chunk)
                    if left < 0:  # more than the header said
                        raise WheelRefused("unsafe_wheel", f"{info.filename!r} is larger than its header says")
                    out.write(chunk)
            written.append(placed.as_posix())
    _make_read_only(target)
    return UnpackedTree(tuple(written), total)


def _make_read_only(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), READ_ONLY_FILE, follow_symlinks=False)
    for dirpath, _dirnames, _ in os.walk(root, topdown=False):
        os.chmod(dirpath, READ_ONLY_DIR)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
