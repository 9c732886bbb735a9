"""`python -m wasm_runner.providers.native doctor [--json]` or `... prepare [--force]`."""

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
    from wasm_runner.providers.native.toolchain import main as toolchain_main

    return toolchain_main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
