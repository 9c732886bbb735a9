"""Which disk-quota enforcement a directory's filesystem offers.

Kernel-enforced limits need a filesystem mounted with project quotas (ext4 `prjquota`, XFS
`prjquota`/`pquota`), or a size-limited filesystem per session (a tmpfs with `size=`).
Without them, quotas are host accounting: the quota watcher re-measures what running guests
can write, and API writes reserve their bytes before writing (wasm_runner.quota).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_QUOTA_OPTIONS = {"prjquota", "pquota", "pqnoenforce", "prjjquota"}
MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    fs_type: str
    options: frozenset[str]


@dataclass(frozen=True)
class DiskEnforcement:
    path: str
    mount_point: str | None
    fs_type: str | None
    kernel: str | None
    """"project-quota", "size-limited-fs" or None (host accounting only)."""
    detail: str


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts(mountinfo: Path = MOUNTINFO) -> list[MountEntry]:
    """Every mount with its per-mount and superblock options (see proc(5), mountinfo)."""
    entries = []
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        options = set(fields[5].split(",")) | set(tail[2].split(","))
        entries.append(MountEntry(_unescape(fields[4]), tail[0], frozenset(o.split("=", 1)[0] for o in options)))
    return entries


def mount_of(path: str | os.PathLike[str], entries: list[MountEntry]) -> MountEntry | None:
    """The mount holding `path` (which need not exist yet)."""
    resolved = Path(os.path.realpath(Path(path).absolute()))  # links resolved as far as the path exists
    best: MountEntry | None = None
    for entry in entries:  # a later mount at the same point shadows an earlier one
        point = Path(entry.mount_point)
        if (resolved == point or point in resolved.parents) and (
                best is None or len(point.parts) >= len(Path(best.mount_point).parts)):
            best = entry
    return best


def disk_enforcement(path: str | os.PathLike[str], mountinfo: Path = MOUNTINFO) -> DiskEnforcement:
    try:
        entry = mount_of(path, mounts(mountinfo))
    except OSError as exc:
        return DiskEnforcement(str(path), None, None, None, f"mounts unreadable ({exc})")
    if entry is None:
        return DiskEnforcement(str(path), None, None, None, "no mount found")
    where = f"{entry.fs_type} at {entry.mount_point}"
    if entry.fs_type in ("ext4", "xfs") and entry.options & PROJECT_QUOTA_OPTIONS:
        return DiskEnforcement(str(path), entry.mount_point, entry.fs_type, "project-quota",
                               f"{where} offers project quotas; not applied by this version")
    if entry.fs_type == "tmpfs" and "size" in entry.options:
        return DiskEnforcement(str(path), entry.mount_point, entry.fs_type, "size-limited-fs",
                               f"{where} is size-limited as a whole, not per session")
    return DiskEnforcement(str(path), entry.mount_point, entry.fs_type, None,
                           f"{where}, mounted without project quotas (prjquota)")
