"""`python -m wasm_runner.providers.native doctor [--json]` or `... prepare [--force]` (python-data and the
JavaScript toolchain, then the web starters' node_modules)."""

from __future__ import annotations

import sys

USAGE = "usage: python -m wasm_runner.providers.native {doctor [--json] | prepare [--force] [--python PATH]}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("doctor", "prepare"):
        print(USAGE, file=sys.stderr)
        return 2
    if args[0] == "doctor":
        from wasm_runner.providers.native.doctor import main as doctor_main

        return doctor_main(args[1:])
    from wasm_runner.providers.native.js_toolchain import ensure_js_toolchain
    from wasm_runner.providers.native.toolchain import ToolchainError
    from wasm_runner.providers.native.toolchain import main as toolchain_main
    from wasm_runner.providers.native.web_starters import ensure_starters

    status = toolchain_main(args[1:])
    try:  # node, bun, tsc, biome and uv for the node, typescript-native and bun profiles
        js = ensure_js_toolchain(force="--force" in args, quiet=False)
    except ToolchainError as exc:
        print(f"js-toolchain: {exc}", file=sys.stderr)
        return 1
    print("js-toolchain ready: " + ", ".join(f"{tool} {version}" for tool, version in js.versions.items())
          + f" at {js.path}")
    try:  # the web starters' node_modules (npm ci with the toolchain's npm), re-installed when a lockfile changes
        starters = ensure_starters(force="--force" in args)
    except ToolchainError as exc:
        print(f"web-starters: {exc}", file=sys.stderr)
        return 1
    print("web starters ready: " + ", ".join(f"{s.name} ({s.bytes // 2**20} MiB)" for s in starters))
    return status


if __name__ == "__main__":
    sys.exit(main())
