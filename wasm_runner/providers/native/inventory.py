"""What the built python-data environment offers: the import names of its pinned packages.

Read from the venv's own package records (each distribution's `top_level.txt`, else the
top-level entries of its RECORD), so a hint naming python-data follows what it really has.
Only the distributions pinned in the requirements count: the venv's pip and setuptools are
not what the profile offers.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Iterable
from pathlib import Path

from wasm_runner.providers.native.toolchain import MARKER, REQUIREMENTS, find_python_data

_IMPORT_NAME = re.compile(r"[A-Za-z]\w*")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_distributions(requirements: Path = REQUIREMENTS) -> frozenset[str]:
    """The canonical names pinned in a requirements file (`name==version` lines)."""
    return frozenset(canonical(match.group(1)) for line in requirements.read_text().splitlines()
                     if (match := _PIN.match(line)))


def import_names(site_packages: Path, distributions: Iterable[str]) -> frozenset[str]:
    """The top-level import names of the named distributions installed in `site_packages`."""
    wanted = {canonical(name) for name in distributions}
    names: set[str] = set()
    for dist in importlib.metadata.distributions(path=[str(site_packages)]):
        if canonical(dist.metadata["Name"] or "") not in wanted:
            continue
        top_level = dist.read_text("top_level.txt")
        if top_level:
            candidates = top_level.split()
        else:
            candidates = [Path(str(file)).parts[0] for file in dist.files or () if Path(str(file)).parts]
        for candidate in candidates:
            name = candidate.split(".")[0]  # `module.py`, `ext.cpython-311-x86_64-linux-gnu.so`
            if (candidate.endswith((".dist-info", ".libs", ".pth", ".data")) or candidate.startswith(("_", ".."))
                    or not _IMPORT_NAME.fullmatch(name)):
                continue
            names.add(name)
    return frozenset(names)


def python_data_modules(path: Path | None = None) -> frozenset[str] | None:
    """The import names the built python-data environment offers (None: it is not built)."""
    found = find_python_data(path)
    if found is None:
        return None
    try:
        stamp = (found.path / MARKER).stat().st_mtime_ns
    except OSError:
        return None
    return _modules_of(str(found.path), stamp)


@functools.lru_cache(maxsize=4)
def _modules_of(venv: str, stamp: int) -> frozenset[str]:
    """Cached per build (`stamp`: the marker's mtime, new with each build)."""
    del stamp
    try:
        pins = pinned_distributions()
    except OSError:
        pins = None
    names: set[str] = set()
    for site_packages in Path(venv).glob("lib/python3*/site-packages"):
        if pins is None:  # installed without the requirements file: every distribution but the venv's own
            pins = frozenset(canonical(d.metadata["Name"] or "") for d in
                             importlib.metadata.distributions(path=[str(site_packages)])) - {"pip", "setuptools"}
        names |= import_names(site_packages, pins)
    return frozenset(names)
