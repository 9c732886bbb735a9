"""Joining a Ray cluster (or starting a local one) for a batch's driver."""

from __future__ import annotations

import logging
import socket
from types import ModuleType

from wasm_runner.cluster.settings import ClusterUnavailableError
from wasm_runner.lowlevel.trap_handlers import keep_trap_handlers

__all__ = ["connect"]

log = logging.getLogger("wasm_runner")

LOCAL_ADDRESS = "127.0.0.1"
"""A cluster started here advertises loopback: nothing outside this machine is told to join it."""
PROBE_TIMEOUT_S = 5.0


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ClusterUnavailableError("Ray is not installed: pip install 'wasm-runner[ray]'") from None
    return ray


def connect(address: str) -> ModuleType:
    """Ray, initialised: the connection this process has, else one to `address` (see `RayCluster`)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    options: dict[str, object] = {"logging_level": logging.WARNING, "log_to_driver": False, "configure_logging": False}
    try:
        if address == "auto":
            address = _cluster_on_this_machine(ray) or "local"
        if address == "local":  # a new one, for this process's life
            options.update(_node_ip_address=LOCAL_ADDRESS, include_dashboard=False)
        else:
            _reachable(address)
        with keep_trap_handlers():  # guests may run in this process too
            ray.init(address=address, **options)
    except ClusterUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; the caller needs the one
        raise ClusterUnavailableError(f"cannot reach the Ray cluster at {address!r}: {exc}") from exc
    return ray


def _cluster_on_this_machine(ray: ModuleType) -> str | None:
    """Where `auto` points (RAY_ADDRESS, else the cluster `ray start` last started here) if it
    answers. Ray would wait minutes on an address file a crashed cluster left behind."""
    try:
        found: str = ray._private.services.get_ray_address_from_environment("auto", None)
    except (ConnectionError, AttributeError):  # none found; or a Ray that finds it otherwise
        return None
    try:
        _reachable(found)
    except ClusterUnavailableError as exc:
        log.warning("ignoring the Ray cluster this machine names (%s): starting a local one", exc)
        return None
    return found


def _reachable(address: str) -> None:
    """Ray waits minutes on a head that does not answer: a closed or unknown one is refused at once."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterUnavailableError(f"a Ray address is 'auto', HOST:PORT or ray://HOST:PORT, not {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ClusterUnavailableError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
