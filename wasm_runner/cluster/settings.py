"""Where and how a batch runs on a Ray cluster."""

from __future__ import annotations

from dataclasses import dataclass

from wasm_runner.errors import WasmRunnerError

__all__ = ["ClusterUnavailableError", "RayCluster"]


class ClusterUnavailableError(WasmRunnerError, RuntimeError):
    """Ray is not installed, the cluster cannot be reached, or no node of it can run items."""


@dataclass(frozen=True)
class RayCluster:
    """A Ray cluster to run batch items on.

    `address` is what `ray.init` takes: `"auto"` joins the cluster already running on this
    machine (`ray start --head`), or starts a local one for this process where none runs;
    `"HOST:PORT"` joins the cluster whose head is there; `"ray://HOST:PORT"` goes through Ray
    Client. A process that called `ray.init` itself keeps its connection, whatever `address` says.
    """

    address: str = "auto"
    lanes_per_node: int | None = None
    """Items a node runs at once; None takes the node's CPUs (as Ray counts them)."""
    chunk_items: int = 16
    """Most items sent to an actor in one call: fewer calls, against a longer wait for the
    last results of a chunk. A chunk is sent with what is there; it never waits to fill up."""
    chunks_per_actor: int = 2
    """Chunks in flight per actor: the next one is there when one finishes."""
    max_attempts: int = 3
    """Runs of an item whose actor or node is lost before it answers; past it the item's result
    is a HostError saying so (an item that kills whatever runs it does not go round forever)."""
    start_timeout_s: float = 300.0
    """How long an actor may take to start (it prepares the runtimes once per node: compiling
    them the first time on a new node takes minutes)."""
    data_dir: str | None = None
    """Where actors keep their scratch workspaces on their node (default: a temporary directory)."""
    keep_actors_s: float = 10.0
    """How long a Runner keeps its actors after its last batch ends: a batch within it starts at
    once; past it they are closed, and give their nodes' CPUs back to the cluster."""

    def actors_key(self) -> tuple[str, int | None, str | None]:
        """What the actors depend on: batches whose settings differ only in how items are sent
        share a Runner's actors (two sets would compete for the same CPUs)."""
        return self.address, self.lanes_per_node, self.data_dir

    def __post_init__(self) -> None:
        if not self.address:
            raise ValueError("address is 'auto', 'HOST:PORT' or 'ray://HOST:PORT'")
        if self.lanes_per_node is not None and self.lanes_per_node < 1:
            raise ValueError("lanes_per_node must be at least 1 (or None for the node's CPUs)")
        for name in ("chunk_items", "chunks_per_actor", "max_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.start_timeout_s <= 0 or self.keep_actors_s < 0:
            raise ValueError("start_timeout_s must be positive, keep_actors_s not negative")
