"""`python -m server serve ...`: the service without the main CLI."""

import sys

from server.cli import main

sys.exit(main())
