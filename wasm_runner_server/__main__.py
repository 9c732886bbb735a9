"""`python -m wasm_runner_server serve ...`: the service without the main CLI."""

import sys

from wasm_runner_server.cli.serve import main

sys.exit(main())
