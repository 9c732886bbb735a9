"""First run: a service started with no keys at all makes one admin key and shows it once, with the
console's address, so a newcomer can sign in at once (as Jupyter prints its token). Only the key's
hash is stored, as for every key; `auth.first_run_key = false` turns this off for deployments."""

from __future__ import annotations

import logging
import sys

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.http.paths import CONSOLE_PREFIX
from wasm_runner_server.http.policy import LOCAL_WORKSPACE
from wasm_runner_server.security.tenants import KeyRecord, TenantStore

log = logging.getLogger("wasm_runner.server.auth")
KEY_NAME = "first-run"


def console_url(config: ServiceConfig) -> str:
    host = config.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{config.server.port}{CONSOLE_PREFIX}/"


def create_first_key(tenants: TenantStore, config: ServiceConfig, out=None) -> KeyRecord:
    """Make the admin key of the `local` workspace and write it, once, to `out` (stdout: stderr carries
    the structured log lines, which never hold a key)."""
    key, record = tenants.create_key(LOCAL_WORKSPACE, KEY_NAME, "admin")
    stream = out if out is not None else sys.stdout
    stream.write(
        "\n  wasm-runner: no API keys existed, so one admin key was made for the workspace "
        f"'{LOCAL_WORKSPACE}'.\n  It is shown this once (only its hash is kept):\n\n      {key}\n\n"
        f"  Open the console at {console_url(config)} and sign in with it, or send\n"
        "  `Authorization: Bearer <key>` to the API. Turn this off with [auth] first_run_key = false.\n\n")
    stream.flush()
    log.warning("first-run admin key created", extra={"event": "first_run_key", "key_id": record.id,
                                                       "workspace": LOCAL_WORKSPACE})
    return record
