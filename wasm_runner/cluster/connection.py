"""Joining a Ray cluster (or starting a local one) for a batch's driver."""

from __future__ import annotations

import logging
import socket
from types import ModuleType

from wasm_runner.cluster.settings import ClusterUnavailableError

__all__ = ["connect"]

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
    options = {"logging_level": logging.WARNING, "log_to_driver": False, "configure_logging": False}
    try:
        if address != "auto":
            _reachable(address)
            ray.init(address=address, **options)
            return ray
        try:
            ray.init(address="auto", **options)
        except ConnectionError:  # none runs on this machine: a local one, for this process's life
            ray.init(_node_ip_address=LOCAL_ADDRESS, include_dashboard=False, **options)
    except ClusterUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; the caller needs the one
        raise ClusterUnavailableError(f"cannot reach the Ray cluster at {address!r}: {exc}") from exc
    return ray


def _reachable(address: str) -> None:
    """Ray waits minutes on a head that does not answer: a closed or unknown one is refused at once."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterUnavailableError(f"a Ray address is 'auto', HOST:PORT or ray://HOST:PORT, not {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ClusterUnavailableError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
