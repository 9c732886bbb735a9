"""A Runner's actors on a Ray cluster: one `NodeRunner` per node, started once and kept for its batches.

An actor is pinned to its node and holds as many of its CPUs as it has lanes. Nodes are looked
up when a batch starts and after an actor is lost, so a node that joins later gets an actor at
the next look. The pool holds no event-loop object: batches on different loops share it.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import uuid
from types import ModuleType
from typing import Any

from wasm_runner.cluster.connection import connect
from wasm_runner.cluster.settings import RayCluster
from wasm_runner.guest import Mount

__all__ = ["ACTOR_PREFIX", "NodeActor", "NodeActors"]

log = logging.getLogger("wasm_runner")

ACTOR_PREFIX = "wasm-runner-batch-"
"""Actors are named, so that an operator sees them for what they are (`ray list actors`, the dashboard)."""
NODE_RUNNER = ("wasm_runner.cluster.node", "NodeRunner")
"""The actor's class, named: it holds a Runner, and the Runner holds this pool."""
CLOSE_GRACE_S = 5.0
"""How long actors get to close their Runners before they are killed."""


class NodeActor:
    """The driver's handle on one node's actor."""

    def __init__(self, handle: Any, node_id: str, lanes: int) -> None:
        self.handle = handle
        self.node_id = node_id
        self.lanes = lanes
        self.started = handle.info.remote()
        """Its NodeInfo once its runtimes are ready (awaited by each batch on its own loop)."""
        self.ready = False
        self.lost = False


class NodeActors:
    """The actors of one Runner on one cluster, kept a while after its last batch."""

    def __init__(self, cluster: RayCluster, mounts: tuple[Mount, ...]) -> None:
        self.cluster = cluster
        self.mounts = [mount.to_config() for mount in mounts]
        self.actors: list[NodeActor] = []
        self.lock = threading.Lock()
        self.ray: ModuleType | None = None
        self.node_runner: Any = None
        """`NodeRunner` as a Ray actor class (made once)."""
        self.batches = 0
        """Batches running on these actors."""
        self.idle_timer: threading.Timer | None = None

    def begin_batch(self) -> None:
        with self.lock:
            self.batches += 1
            if self.idle_timer is not None:
                self.idle_timer.cancel()
                self.idle_timer = None

    def end_batch(self, keep_s: float) -> None:
        """A batch ended: once none runs, the actors are closed `keep_s` later."""
        with self.lock:
            self.batches -= 1
            if self.batches == 0 and self.actors:
                self.idle_timer = threading.Timer(keep_s, self._close_if_idle)
                self.idle_timer.daemon = True
                self.idle_timer.start()

    async def refresh(self) -> str | None:
        """Start an actor on each live node with a CPU that has none; None, or why none could be."""
        self.ray = await asyncio.to_thread(connect, self.cluster.address)
        try:
            nodes = await asyncio.to_thread(self.ray.nodes)
        except Exception as exc:  # noqa: BLE001 - the head is unreachable: nothing to add now
            return f"cannot list the cluster's nodes: {exc}"
        with self.lock:
            served = {actor.node_id for actor in self.actors if not actor.lost}
            for node in nodes:
                cpus = int(node.get("Resources", {}).get("CPU", 0))
                if node.get("Alive") and cpus >= 1 and node["NodeID"] not in served:
                    self.actors.append(self._start(node["NodeID"], cpus))
            return None if self.actors else "the cluster has no node with a CPU"

    def _start(self, node_id: str, cpus: int) -> NodeActor:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        assert self.ray is not None
        lanes = self.cluster.lanes_per_node or cpus
        if self.node_runner is None:
            module, name = NODE_RUNNER
            self.node_runner = self.ray.remote(getattr(importlib.import_module(module), name))
        remote = self.node_runner.options(
            name=f"{ACTOR_PREFIX}{uuid.uuid4().hex}", num_cpus=min(lanes, cpus), max_restarts=0, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
        return NodeActor(remote.remote(lanes, self.cluster.data_dir, self.mounts), node_id, lanes)

    def live(self) -> list[NodeActor]:
        with self.lock:
            return [actor for actor in self.actors if not actor.lost]

    def lose(self, actor: NodeActor) -> None:
        """Kill it and leave it out (its node, if still there, gets a new one at the next refresh)."""
        with self.lock:
            if actor.lost:
                return
            self._take_out(actor)
        self._kill([actor])

    def close(self) -> None:
        """Close every actor now (see `_close`)."""
        with self.lock:
            actors = self._take_all()
        self._close(actors)

    def _close_if_idle(self) -> None:
        with self.lock:
            actors = self._take_all() if self.batches == 0 else []
        self._close(actors)

    def _take_out(self, actor: NodeActor) -> None:
        """(lock held) No batch sends it anything more."""
        actor.lost = True
        self.actors.remove(actor)

    def _take_all(self) -> list[NodeActor]:
        """(lock held) Every actor, out of the pool: a batch that starts now gets new ones."""
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        actors = list(self.actors)
        for actor in actors:
            self._take_out(actor)
        return actors

    def _close(self, actors: list[NodeActor]) -> None:
        """Let the actors close their Runners (their scratch files go with them), then kill them."""
        closing = [actor.handle.close.remote() for actor in actors if actor.ready]
        if closing and self.ray is not None:
            self.ray.wait(closing, num_returns=len(closing), timeout=CLOSE_GRACE_S)
        self._kill(actors)

    def _kill(self, actors: list[NodeActor]) -> None:
        for actor in actors:
            try:
                assert self.ray is not None
                self.ray.kill(actor.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - it is gone already
                pass
