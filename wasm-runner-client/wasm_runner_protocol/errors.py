"""The root of every exception wasm-runner raises, the client's and the core's alike."""

from __future__ import annotations

__all__ = ["WasmRunnerError"]


class WasmRunnerError(Exception):
    """Base of every error wasm-runner raises for its own failures (client and core)."""
