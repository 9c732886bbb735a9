"""Packages that stay: host-resolved installs into a session, cached per workspace by content hash.

`PackageInstaller.install(SessionPackages, PackageRequest)` resolves with uv on the host, downloads
through the egress policy, refuses what the WebAssembly guest cannot load (native code, source
distributions) with a hint, and links the unpacked wheels into the session's read-only /packages.
The installer and cache are imported on first use: a run that installs nothing does without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wasm_runner.packages.session_dir import SessionPackages
from wasm_runner.packages.settings import PackageSettings

if TYPE_CHECKING:
    from wasm_runner.packages.cache import PackageCache
    from wasm_runner.packages.installer import PackageInstaller

__all__ = ["PackageCache", "PackageInstaller", "PackageSettings", "SessionPackages"]


def __getattr__(name: str) -> Any:
    if name == "PackageInstaller":
        from wasm_runner.packages.installer import PackageInstaller

        return PackageInstaller
    if name == "PackageCache":
        from wasm_runner.packages.cache import PackageCache

        return PackageCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
