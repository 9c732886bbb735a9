"""`[store]`: where the metadata lives (sessions, tenants and keys, the audit log).

    [store]
    url = "postgresql://wasm:secret@db.internal:5432/wasm_runner"   # default: "sqlite"
    node = "node-a"                                                  # default: kept in the data directory

`WASM_RUNNER_STORE_URL` overrides `url`. The URL's password is never logged (`redacted`).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, field_validator
from yarl import URL

from wasm_runner.profiles import ConfigModel
from wasm_runner_server.data_dir import FILE_MODE, mount_path, private_directory

URL_VARIABLE = "WASM_RUNNER_STORE_URL"
ADVERTISE_VARIABLE = "WASM_RUNNER_ADVERTISE_URL"
NODE_FILE = "node-name"
NODE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"


INVALID = "invalid: "
"""A URL refused, its password already removed: pydantic quotes a refused value in its error."""


def _valid(value: str) -> bool:
    if value == "sqlite":
        return True
    try:
        url = URL(value)
    except ValueError:
        return False
    return url.scheme in ("postgresql", "postgres") and bool(url.host or url.query.get("host"))


def _redacted_if_refused(value: object) -> object:
    if isinstance(value, str) and not _valid(value):
        return INVALID + redact(value)  # what the error below quotes
    return value


def _a_database(value: str) -> str:
    if value.startswith(INVALID):
        raise ValueError('store.url must be "sqlite" or a postgresql://USER:PASSWORD@HOST:PORT/DB URL')
    return value


class StoreSettings(ConfigModel):
    url: Annotated[str, AfterValidator(_a_database), BeforeValidator(_redacted_if_refused)] = "sqlite"
    """"sqlite": SQLite files in the data directory (one machine); "postgresql://USER:PASSWORD@HOST:PORT/DB"
    (or a libpq key/value string is not accepted: use the URL form): one database shared by every node."""
    node: str | None = None
    """This node's name in a cluster (a session lives on the node that created it). Default: a name made
    once and kept in the data directory (`node-name`), so a restarted node is the same node."""
    pool_size: Annotated[int, Field(ge=1, le=256)] = 8
    """PostgreSQL connections this node holds at most."""
    connect_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    """How long start-up waits for the database before it fails."""
    journal_dir: str | None = None
    """A directory every node mounts (NFS, CephFS, EFS): each node keeps its audit journal there
    (`<node>.journal`, locked while the node lives), and the other nodes replay into the database, within
    a minute, the journal of a node that died. Default: each node's data directory (replayed when that
    node starts again, or by `wasm-runner audit replay`)."""
    advertise_url: str | None = None
    """The URL the other nodes reach this node at (`http://10.0.0.5:8080`; `WASM_RUNNER_ADVERTISE_URL`):
    a request for a session this node holds is forwarded here by the node it reached. Default: the
    address the service listens on, unless that is every address (0.0.0.0 or ::)."""

    @field_validator("node")
    @classmethod
    def _a_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(NODE_PATTERN, value):
            raise ValueError("store.node is 1-63 letters, digits, '.', '-' or '_'")
        return value

    @field_validator("journal_dir")
    @classmethod
    def _a_directory(cls, value: str | None) -> str | None:
        return mount_path(value, "store.journal_dir")

    @field_validator("advertise_url")
    @classmethod
    def _a_base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            url = URL(value)
        except ValueError:
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host or url.query_string or url.fragment:
            raise ValueError("store.advertise_url is an http:// or https:// URL with a host (and a port), "
                             "e.g. http://10.0.0.5:8080")
        return value.rstrip("/")

    @property
    def postgres(self) -> bool:
        return self.url != "sqlite"

    @property
    def redacted(self) -> str:
        """The URL without its password (what logs and errors may show)."""
        return redact(self.url)

    def node_name(self, data_dir: Path) -> str:
        """This node's name: the configured one, else the one kept in the data directory (made once)."""
        if self.node is not None:
            return self.node
        path = private_directory(Path(data_dir)) / NODE_FILE
        try:
            name = path.read_text().strip()
            if re.fullmatch(NODE_PATTERN, name):
                return name
        except FileNotFoundError:
            pass
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:40] or "node"
        name = f"{host}-{secrets.token_hex(3)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        with os.fdopen(fd, "w") as file:
            file.write(name + "\n")
        return name

    def with_environment(self, environ: Mapping[str, str] = os.environ) -> StoreSettings:
        """These settings with `WASM_RUNNER_STORE_URL` and `WASM_RUNNER_ADVERTISE_URL` applied."""
        changes = {key: environ[variable] for key, variable in (("url", URL_VARIABLE),
                                                                ("advertise_url", ADVERTISE_VARIABLE))
                   if environ.get(variable)}
        if not changes:
            return self
        return StoreSettings.model_validate({**self.model_dump(), **changes})


def redact(url: str) -> str:
    """`url` with any password replaced by ***."""
    if url == "sqlite":
        return url
    try:
        parsed = URL(url)
    except ValueError:
        return "***"
    if parsed.password is not None:
        parsed = parsed.with_password("***")
    if "password" in parsed.query:
        parsed = parsed.update_query(password="***")
    return str(parsed)
