"""The native provider: commands, shell scripts, python-data and Node.js in bubblewrap.

Public entry points:
- `NativeProvider(policy=None, *, allow_unsandboxed=False, ...)`: the Provider (Runner picks it
  for `command`, bash/sh, and `provider="native"`).
- `process_request(command, args, **fields)`: the ExecRequest behind `process(...)` / HTTP /process.
- `doctor()` / `format_report()`: what this machine has (the CLI's `wasm-runner doctor`).
- `ensure_python_data()`: build the python-data venv once (called by `prepare`).
- `ensure_js_toolchain()` / `find_js_toolchain()`: node, bun, tsc, biome and uv, pinned, built once.
- `python -m wasm_runner.providers.native doctor [--json] | prepare [--force]`: the same from a shell.
- `SandboxPolicy`, `Bind`: the sandbox policy, narrowed or explicitly widened per profile.
- `NATIVE_PROFILES`: the request fields of the python-data, node and bash profiles.
"""

from wasm_runner.providers.native.bwrap import Bind, SandboxPolicy
from wasm_runner.providers.native.doctor import doctor, format_report
from wasm_runner.providers.native.js_toolchain import JsToolchain, ensure_js_toolchain, find_js_toolchain
from wasm_runner.providers.native.provider import NativeProvider, process_request
from wasm_runner.providers.native.toolchain import PythonData, ToolchainError, ensure_python_data, find_python_data

NATIVE_PROFILES: dict[str, dict[str, object]] = {
    "python-data": {"language": "python", "provider": "native"},
    "node": {"language": "javascript", "provider": "native"},
    "typescript-native": {"language": "typescript", "provider": "native"},
    "bun": {"language": "typescript", "provider": "native", "env": {"WASM_RUNNER_JS_RUNTIME": "bun"}},
    "bash": {"language": "bash", "provider": "native"},
}
"""Request fields each native profile sets (the server's profiles add limits and policy)."""

__all__ = [
    "NATIVE_PROFILES",
    "Bind",
    "JsToolchain",
    "NativeProvider",
    "PythonData",
    "SandboxPolicy",
    "ToolchainError",
    "doctor",
    "ensure_js_toolchain",
    "ensure_python_data",
    "find_js_toolchain",
    "find_python_data",
    "format_report",
    "process_request",
]
