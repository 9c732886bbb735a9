"""What a session says of its background processes and terminals after it moved to another node.

They run on the node that started them and end with it. So that the node that takes the session over
can say so, each stored generation carries the session's process list (`RECORD`, beside its files);
the new node lists those that were running as killed, naming the node they ended with, and numbers
its own processes after them (an id is never reused within a session).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import msgspec

from wasm_runner import Session
from wasm_runner_protocol.processes import ProcessInfo

RECORD = ".processes.json"
"""In the session's directory (beside `files/`, out of the guest's sight); stored with each generation."""
_ID = re.compile(r"p([0-9]+)")


def record(root: Path, earlier: list[ProcessInfo], session: Session) -> None:
    """Write the session's processes (`earlier`: those of nodes it was on before) for the next generation;
    the file is left as it is when nothing changed (it is not uploaded again)."""
    infos = earlier + ([p.info() for p in session.processes.all()] if session.has_processes else [])
    path = root / RECORD
    if not infos:
        path.unlink(missing_ok=True)
        return
    data = msgspec.json.encode(infos)
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    path.write_bytes(data)


def ended_with(root: Path, node: str, here: str) -> list[ProcessInfo]:
    """The processes `root`'s record names, those that ran ended with `node` (the session is now on `here`)."""
    path = root / RECORD
    try:
        infos = msgspec.json.decode(path.read_bytes(), type=list[ProcessInfo])
    except (OSError, msgspec.ValidationError, msgspec.DecodeError):
        return []
    why = (f"it ended with node {node!r}, which stopped or stopped answering, when the session moved to node "
           f"{here!r}: start it again")
    return [msgspec.structs.replace(i, state="killed", error=why, ports=[], memory_bytes=0)
            if i.state in ("starting", "running") else i for i in infos]


def last_number(infos: list[ProcessInfo]) -> int:
    """The highest `pN` among `infos` (0 for none)."""
    return max((int(m.group(1)) for i in infos if (m := _ID.fullmatch(i.id))), default=0)
