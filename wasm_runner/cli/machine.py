"""`wasm-runner prepare` and `wasm-runner doctor`: this machine's runtimes and native tools."""

from __future__ import annotations

import argparse

from wasm_runner.runner import Runner


def prepare_command(args: argparse.Namespace) -> int:
    with Runner() as runner:
        runner.prepare()
    print("runtimes ready")
    return 0


def doctor_command(args: argparse.Namespace) -> int:
    from wasm_runner.providers.native.doctor import main as doctor_main

    return doctor_main(["--json"] if args.json else [])
