"""The pipes between a Runner and its worker processes: length-prefixed msgpack frames."""

from __future__ import annotations

import struct
from typing import IO, Any, Literal

import msgspec

from wasm_runner_protocol.execution import ExecRequest, ExecResult
from wasm_runner_protocol.guest import GUEST_WORKSPACE

__all__ = ["READY", "RETIRED_EXIT_CODE", "Answer", "Order", "Place", "read_frame", "write_frame"]

_HEADER = struct.Struct("<I")
READY = b"ready"
"""The worker's first frame: it takes orders from now on."""
RETIRED_EXIT_CODE = 70
"""A worker's exit once it answered for a guest stuck in a host call: it started nothing after it."""


class Place(msgspec.Struct, array_like=True):
    """A session whose kernels a worker hosts: its id, its directory and its own mounts."""

    session: str
    root: str
    files: str | None = None
    """Its /workspace where that is not `root/files` (an existing host directory)."""
    mounts: list[dict[str, Any]] = []
    owner: str = ""
    """The workspace it belongs to (its kernel images are checked against it)."""
    workdir: str = ""
    """The guest's working directory under its disk ("" for the disk itself)."""
    guest_root: str = GUEST_WORKSPACE
    """Where the guest's working directory is taken from (`Workspace.guest_root`)."""


class Order(msgspec.Struct, array_like=True):
    """Parent to worker: run `request` as item `seq` (in the session `place`'s kernels when
    given), cancel item `seq` (no request), hibernate or forget the session `place`, or answer
    the guest's install request `seq` (`install`, with `reply`). A hibernate order with a `seq`
    is answered (`Answer.hibernated`) once its kernels are saved; a save order saves them and
    keeps them running."""

    seq: int
    request: ExecRequest | None = None
    place: Place | None = None
    kind: Literal["", "hibernate", "save", "forget", "over-budget", "install", "tool"] = ""
    """`over-budget`: a mount's budget, which the parent keeps, is exceeded: stop run `seq` for disk."""
    stream: bool = False
    """Send the run's output as `Answer` chunks while it runs (a listener waits for them)."""
    reply: str = ""
    """With `install`: the parent's `InstallResult` as JSON, given to the guest as it is; with
    `tool`: the parent's answer to the guest's tool call (JSON), likewise."""
    disk_room: int | None = None
    """With a request: the most the run may add to disk besides its limits (`Session.disk_room`)."""
    compress: bool = True
    """With `save`: compress the images (hibernation), or not (a fork's, read back at once)."""


class Answer(msgspec.Struct, array_like=True):
    """Worker to parent: item `seq`'s result, or a chunk of its output (`stream`, `data`), or
    (`seq` 0, `retiring`) the notice that the worker takes no more sessions and exits once
    its runs in flight are answered, or the guest of run `seq` asking the parent to install
    (`install`, numbered `ask`: the parent answers with an `install` order of that number) or
    to call a tool (`tool`, likewise)."""

    seq: int
    result: ExecResult | None = None
    stream: Literal["stdout", "stderr"] | None = None
    data: bytes = b""
    kernels: list[str] | None = None
    """With a kernel run's result: the languages whose kernels the session now holds."""
    retiring: str | None = None
    """Why the worker gives itself up."""
    install: str | None = None
    """The guest's `sandbox.install` request as it wrote it (JSON): data for the parent to check."""
    ask: int = 0
    hibernated: bool = False
    """With `seq`: the hibernate or save order of that number is done (its kernels' images are saved)."""
    refused: dict[str, str] = {}
    """With `hibernated`: the languages whose kernel could not be saved, and why."""
    tool: str | None = None
    """The guest's tool call as it wrote it (JSON), numbered `ask`: the parent, which holds the run's
    tools, decides and answers with a `tool` order of that number."""


def write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, or None at the end of the stream (a partial frame included)."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None
