"""What to do about the common failures of sandboxed code: a hint added to its error."""

from __future__ import annotations

import re

from wasm_runner_protocol.execution import GuestError
from wasm_runner_protocol.guest import GUEST_TMP, GUEST_WORKSPACE

_NETWORK = re.compile(r"socket|getaddrinfo|urllib|http\.client|ConnectionRefused|gaierror", re.I)
_ENV_LOOKUP = re.compile(r"environ\s*\[|getenv|environ\.get|process\.env|std\.getenv")
_OUTSIDE_PATH = re.compile(rf"""['"](/(?!{re.escape(GUEST_WORKSPACE[1:])}\b|{re.escape(GUEST_TMP[1:])}\b)[^'"]*)['"]""")

NETWORK_HINT = ("network access is denied in this sandbox: no sockets, connections or name lookups; "
                f"bring data in as files in {GUEST_WORKSPACE}")
ENV_HINT = ("the sandbox sees only a few standard variables plus those passed in the request's `env` "
            "(or named by its profile); pass the variable explicitly")
OUTSIDE_HINT = f"only {GUEST_WORKSPACE} (the working directory) and {GUEST_TMP} are writable; other paths do not exist here"


def with_hint(error: GuestError) -> GuestError:
    """The same error, with `hint` set when it is one of the common sandbox failures."""
    if error.hint is not None:
        return error
    text = f"{error.message}\n{error.traceback}"
    hint = None
    if error.type in ("PermissionError", "gaierror", "OSError", "ConnectionRefusedError", "URLError") and \
            _NETWORK.search(text):
        hint = NETWORK_HINT
    elif error.type == "KeyError" and _ENV_LOOKUP.search(error.source or text):
        hint = ENV_HINT
    elif error.type in ("FileNotFoundError", "PermissionError", "NotADirectoryError", "OSError") and \
            _OUTSIDE_PATH.search(error.message):
        hint = OUTSIDE_HINT
    if hint is None:
        return error
    return GuestError(type=error.type, message=error.message, traceback=error.traceback, line=error.line,
                      source=error.source, hint=hint)
