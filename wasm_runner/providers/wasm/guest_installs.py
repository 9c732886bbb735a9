"""The host side of the Python guest's `sandbox.install(...)`: a WIT import answered by the session.

The import is linked once per engine, for every instance; which session asks is told by the
worker thread running the call (`serve`), set around each execution by the provider. A guest
outside a session (one-shot runs, batches) gets a refusal. The handler is the session's, with
the same policy and limits as the API's installs; it must answer JSON and never raise into the
guest (an exception in a host function poisons the instance).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

IMPORT_NAME = "install-packages"
log = logging.getLogger("wasm_runner")

_current = threading.local()


def refusal(kind: str, message: str, hint: str | None = None) -> str:
    """An `InstallResult` refusing the guest's request, as JSON (the guest raises it as RuntimeError)."""
    error: dict[str, str] = {"kind": kind, "message": message}
    if hint:
        error["hint"] = hint
    return json.dumps({"ok": False, "error": error})


def serve(handler: Callable[[str], str] | None) -> Callable[[str], str] | None:
    """Calls on this thread answer the guest's install requests with `handler` (None: refused);
    returns the handler it replaces, to put back when the execution ends."""
    previous = getattr(_current, "handler", None)
    _current.handler = handler
    return previous


def answer(_store: Any, request: str) -> str:
    handler: Callable[[str], str] | None = getattr(_current, "handler", None)
    if handler is None:
        return refusal("unsupported_ecosystem", "packages install into sessions only",
                       "run in a session (POST /v1/sessions, runner.session()) and install there")
    try:
        return handler(request)
    except Exception as exc:  # noqa: BLE001 - the guest gets a result, the instance stays usable
        log.exception("a guest's install request failed on the host")
        return refusal("resolver_failed", f"the host could not install: {exc}")
