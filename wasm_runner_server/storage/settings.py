"""`[storage]`: where sessions' files and kernel images are kept besides the node's own disk.

    [storage]
    kind = "s3"                                   # default: "local" (the node's disk only); or "posix"
    endpoint = "https://s3.eu-west-1.amazonaws.com"
    bucket = "wasm-runner"
    prefix = "prod/"
    region = "eu-west-1"
    access_key_id = "..."                         # or WASM_RUNNER_S3_ACCESS_KEY_ID
    secret_access_key = "..."                     # or WASM_RUNNER_S3_SECRET_ACCESS_KEY
    lease_s = 15                                  # a session's lease (with a PostgreSQL [store])

    path = "/mnt/shared/wasm-runner"              # kind = "posix": a directory every node mounts (NFS...)

With object storage, what a call changed is stored before the call is answered (`durability = "call"`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from yarl import URL

from wasm_runner.profiles import ConfigModel
from wasm_runner_server.data_dir import mount_path

KEY_VARIABLE = "WASM_RUNNER_S3_ACCESS_KEY_ID"
SECRET_VARIABLE = "WASM_RUNNER_S3_SECRET_ACCESS_KEY"


class StorageSettings(ConfigModel):
    kind: Literal["local", "s3", "posix"] = "local"
    """"local": a session's files and kernel images are on the node's disk only (one machine);
    "s3": they are also stored in an S3-compatible bucket, so that another node can take the session over;
    "posix": the same, in a directory every node mounts (NFS, CephFS, EFS: `path`)."""
    path: str | None = None
    """kind = "posix": the shared directory's absolute path, the same on every node (made if missing)."""
    endpoint: str | None = None
    """The S3 endpoint's URL (http:// is accepted: for a store on the node's network only). None: AWS's."""
    bucket: str = ""
    prefix: str = ""
    """Where in the bucket this service's objects go: empty, or ending with "/"."""
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    durability: Literal["call", "checkpoint"] = "call"
    """"call": what a request changed (files and kernel images) is stored before it is answered: nothing
    answered is lost when a node dies. "checkpoint": stored every `checkpoint_s` and when the session is
    let go (hibernated, the node stopping): faster calls, and up to `checkpoint_s` of answered changes
    lost when a node dies (each session states the window)."""
    checkpoint_s: Annotated[float, Field(ge=1, le=3600)] = 30.0
    """durability = "checkpoint": how often a session's changes are stored at most."""
    chunk_bytes: Annotated[int, Field(ge=64 * 1024, le=64 * 1024 * 1024)] = 1024 * 1024
    """Files are stored as chunks of this size, each keyed by its SHA-256: a changed file uploads only the
    chunks that changed."""
    lease_s: Annotated[float, Field(ge=0.5, le=3600)] = 15.0
    """How long a node's claim on a session lasts unless renewed (renewed every third of it). Another node
    takes the session over once it has expired: about this long after its node died."""
    upload_threads: Annotated[int, Field(ge=1, le=64)] = 8

    @field_validator("prefix")
    @classmethod
    def _a_prefix(cls, value: str) -> str:
        if value and (not re.fullmatch(r"([A-Za-z0-9._-]+/)+", value)
                      or any(part in (".", "..") for part in value.split("/"))):
            raise ValueError('storage.prefix is empty or folder names of letters, digits, ".", "-", "_" (not "." '
                             'or ".."), each ending with "/"')
        return value

    @field_validator("path")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        return mount_path(value, "storage.path")

    @field_validator("endpoint")
    @classmethod
    def _an_endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            url = URL(value)
        except ValueError:
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host or url.user or url.password:
            raise ValueError("storage.endpoint is an http(s)://HOST[:PORT] URL, without credentials")
        return value

    @field_validator("bucket")
    @classmethod
    def _a_bucket(cls, value: str) -> str:
        if value and not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", value):
            raise ValueError("storage.bucket is an S3 bucket name (3-63 lower-case letters, digits, '.', '-')")
        return value

    @property
    def objects(self) -> bool:
        """Whether sessions are stored beyond the node (object storage)."""
        return self.kind != "local"

    @property
    def workspaces_shared(self) -> bool:
        """Whether the workspaces' own directories are on a mount every node shares (`workspaces_dir`)."""
        return self.kind == "posix" and bool(self.path)

    def workspaces_dir(self, data_dir: Path) -> Path:
        """Where the workspaces' own directories are (shared/, members' disks, end users' roots): in the data
        directory, or, with `kind = "posix"`, on the shared mount, so that every node sees the same ones."""
        if self.workspaces_shared:
            return Path(str(self.path)) / self.prefix / "workspaces"
        return Path(data_dir) / "workspaces"

    def with_environment(self, environ: Mapping[str, str] = os.environ) -> StorageSettings:
        """These settings with the credentials from the environment where the file gives none."""
        changes: dict[str, object] = {}
        if self.access_key_id is None and environ.get(KEY_VARIABLE):
            changes["access_key_id"] = environ[KEY_VARIABLE]
        if self.secret_access_key is None and environ.get(SECRET_VARIABLE):
            changes["secret_access_key"] = SecretStr(environ[SECRET_VARIABLE])
        return self.model_copy(update=changes) if changes else self
