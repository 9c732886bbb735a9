"""Kernel snapshots: a WebAssembly kernel's state at rest as data (format, validity, storage).

The same image serves hibernation and restarts (saved with the session), rolling back a call
that hit a limit (kept in memory), forks and templates (copied to other sessions)."""

from wasm_runner.snapshots.image import ImageRefused, KernelImage, SnapshotRefused
from wasm_runner.snapshots.store import KernelImages

__all__ = ["ImageRefused", "KernelImage", "KernelImages", "SnapshotRefused"]
