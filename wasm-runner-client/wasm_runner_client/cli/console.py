"""`wasm-runner console`: a link that signs the browser console in as the command's key."""

from __future__ import annotations

import argparse
import webbrowser

from wasm_runner_client.cli.connection import connect
from wasm_runner_client.cli.display import print_json
from wasm_runner_client.cli.status import OK, guarded


@guarded
def console_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        link = client.console_link()
    if args.json:
        print_json(link)
    else:
        print(link.url)
    if args.open:
        webbrowser.open(link.url)
    return OK
