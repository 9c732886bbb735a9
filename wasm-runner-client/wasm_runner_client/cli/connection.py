"""The service a command talks to: `--url` (else $WASM_RUNNER_URL, else http://127.0.0.1:8080)
and `--api-key` (else $WASM_RUNNER_API_KEY), as the typed client reads them."""

from __future__ import annotations

import argparse

from wasm_runner_client.sync_client import Client


def connect(args: argparse.Namespace) -> Client:
    return Client(args.url, api_key=args.api_key)
