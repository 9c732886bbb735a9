"""`python -m wasm_runner.cli ...`: the core's commands without the server's."""

import sys

from wasm_runner.cli.commands import main

sys.exit(main())
