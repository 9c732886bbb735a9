"""Host side of TypeScript in WebAssembly: the JavaScript runtime with a transpiler in its snapshot.

TypeScript runs on the same QuickJS module, driver and turns as JavaScript (same limits,
workspace and result shape); only the snapshot differs: it is built from the pinned sucrase
package (`_runtimes/typescript/`, vendored npm tarball checked against sha256) evaluated
before the driver, with the transform warmed up once, so a run pays no load cost. Each
program is transpiled inside the sandbox by that code; sucrase removes types in place, so
lines (and runtime errors' line numbers) are the TypeScript source's.

Sucrase handles types, interfaces, enums, generics, `import type`, parameter properties,
abstract classes and ES modules; it erases namespaces (reading them as types) and passes
decorators through to QuickJS, which has none: the driver's error then says so and names a
native profile. Type checking is not a transform: see `wasm_runner.providers.native.typecheck`.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

from wasm_runner.errors import RuntimeUnavailableError
from wasm_runner.manifests import Manifest, load_manifest
from wasm_runner.providers.wasm.javascript import JavaScriptRuntime

__all__ = ["TypeScriptRuntime", "transpiler_prelude"]

_SKIPPED = ("package/dist/esm/", "package/dist/types/", "package/dist/cli.js", "package/dist/register.js")
"""Parts of the package the transform never loads (its ES module copy, command line, require hook)."""


def transpiler_prelude(manifest: Manifest) -> bytes:
    """The script the TypeScript snapshot evaluates before the driver: sucrase's CommonJS files
    as functions, then the glue (`transpile.js`) that loads them and defines the transform."""
    archive = manifest.directory / manifest["transpiler_archive"]
    try:
        data = archive.read_bytes()
    except OSError as exc:
        raise RuntimeUnavailableError(f"the TypeScript transpiler {archive} is missing: reinstall wasm-runner") from exc
    actual, pinned = hashlib.sha256(data).hexdigest(), manifest["transpiler_sha256"]
    if actual != pinned:
        raise RuntimeUnavailableError(
            f"{archive} has sha256 {actual}, expected {pinned}: not the pinned {manifest['transpiler']} "
            f"{manifest['transpiler_version']}; reinstall wasm-runner")
    parts = ["((SOURCES) => {\n", (manifest.directory / manifest["prelude"]).read_text("utf-8"), "\n})({\n"]
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name
            if not (member.isfile() and name.startswith("package/dist/") and name.endswith(".js")):
                continue
            if name.startswith(_SKIPPED):
                continue
            source = tar.extractfile(member)
            assert source is not None
            path = name.removeprefix("package/dist/")
            parts.append(f"{json.dumps(path)}: function (exports, require, module) {{\n")
            parts.append(source.read().decode("utf-8"))
            parts.append("\n},\n")
    parts.append("});\n")
    return "".join(parts).encode("utf-8")


class TypeScriptRuntime(JavaScriptRuntime):
    """QuickJS with sucrase in the snapshot; programs are TypeScript, transpiled in the guest."""

    language = "typescript"

    def __init__(self) -> None:
        super().__init__()  # the JavaScript runtime's artifact and pins
        self.typescript = load_manifest("typescript")

    def driver_source(self) -> bytes:
        return transpiler_prelude(self.typescript) + super().driver_source()

    def driver_identity(self) -> bytes:
        # The pinned archive's sha256 stands for its files (the prelude checks it when built).
        glue: bytes = (self.typescript.directory / self.typescript["prelude"]).read_bytes()
        sha256: str = self.typescript["transpiler_sha256"]
        return sha256.encode() + b"\0" + glue + b"\0" + super().driver_source()
