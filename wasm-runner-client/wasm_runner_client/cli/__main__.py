"""`python -m wasm_runner_client.cli`: the service commands without the rest of wasm-runner."""

import sys

from wasm_runner_client.cli import main

sys.exit(main())
