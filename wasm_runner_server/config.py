"""Service configuration and execution profiles, validated by pydantic.

A config file (TOML or JSON) may set any of:

    default_profile = "python"

    [server]                      # see ServerSettings
    concurrency = 4
    queue_size = 64

    [sessions]                    # defaults and maxima for idle timeout and TTL
    idle_timeout_s = 600
    ttl_s = 86400

    [limits.default]              # server defaults under every profile
    timeout_s = 10
    [limits.max]                  # no request or profile may ask more
    timeout_s = 300

    [profiles.python-small]       # named profiles, added to (or replacing) the built-ins
    language = "python"
    limits = { timeout_s = 2, memory_bytes = 67108864 }
    env_allowlist = ["MY_*"]
    mounts = [{ host = "/srv/datasets", guest = "/data" }]

Built-in profiles: python, javascript (WebAssembly), and python-data, node, bash
(the native provider, where it is installed).
"""

from __future__ import annotations

import fnmatch
import json
import os
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from wasm_runner import Limits
from wasm_runner_protocol.execution import MiB
from wasm_runner_protocol.guest import check_guest_path
from wasm_runner_server.security.settings import AuthSettings

GiB = 1024 * MiB
NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
"""pydantic-core matches with Rust's regex, whose $ is the end of the text (no final-newline match)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsConfig(_Model):
    """Partial limits: unset fields fall through to the next layer."""

    timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = None
    fuel: Annotated[int, Field(gt=0)] | None = None
    memory_bytes: Annotated[int, Field(ge=32 * MiB)] | None = None
    output_bytes: Annotated[int, Field(ge=0)] | None = None
    disk_bytes: Annotated[int, Field(ge=0)] | None = None
    disk_files: Annotated[int, Field(ge=0)] | None = None

    def values(self) -> dict[str, float | int]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class MaxLimits(_Model):
    """The most any request or profile may ask for (fuel: null = no cap)."""

    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0
    fuel: Annotated[int, Field(gt=0)] | None = None
    memory_bytes: Annotated[int, Field(ge=32 * MiB)] = 2 * GiB
    output_bytes: Annotated[int, Field(ge=0)] = 16 * MiB
    disk_bytes: Annotated[int, Field(ge=0)] = 4 * GiB
    disk_files: Annotated[int, Field(ge=0)] = 100_000

    def as_limits(self) -> Limits:
        return Limits(timeout_s=self.timeout_s, fuel=self.fuel, memory_bytes=self.memory_bytes,
                      output_bytes=self.output_bytes, disk_bytes=self.disk_bytes, disk_files=self.disk_files)


class LimitsSection(_Model):
    default: LimitsConfig = LimitsConfig()
    max: MaxLimits = MaxLimits()


class MountConfig(_Model):
    host: Path
    guest: str
    read_only: Literal[True] = True
    """Mounts are read-only (the only kind the sandbox offers)."""

    @field_validator("guest")
    @classmethod
    def _guest_path(cls, value: str) -> str:
        return check_guest_path(value)  # the rule of every Mount

    @field_validator("host")
    @classmethod
    def _host_dir(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("host must be an absolute path")
        if not value.is_dir():
            raise ValueError(f"host directory {value} does not exist")
        return value


class Profile(_Model):
    """A named way to run code: runtime, limits, mounts, environment, network."""

    description: str = ""
    language: Literal["python", "javascript", "bash", "sh"] = "python"
    """The runtime: the language used when a request names none."""
    provider: Literal["wasm", "native"] | None = None
    """Who runs it; null routes by language (python/javascript -> wasm)."""
    limits: LimitsConfig = LimitsConfig()
    mounts: list[MountConfig] = []
    env: dict[str, str] = {}
    """Variables every run of this profile sees."""
    env_allowlist: list[str] = ["*"]
    """Names (fnmatch patterns) a request may set in `env`; others are refused."""
    network: Literal["deny"] = "deny"
    """Guests have no sockets; "deny" is the only setting."""

    def allows_env(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.env_allowlist)

    @property
    def mount_key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((str(m.host), m.guest) for m in self.mounts))


NATIVE_ENV = ["LANG", "LC_*", "TZ", "TERM", "COLUMNS", "LINES", "PYTHON*", "NODE_ENV", "OMP_NUM_THREADS"]

BUILTIN_PROFILES: dict[str, Profile] = {
    "python": Profile(description="CPython in WebAssembly (WASI): fast fresh instances, persistent kernels",
                      language="python"),
    "javascript": Profile(description="JavaScript in WebAssembly (WASI)", language="javascript"),
    "python-data": Profile(description="native CPython with the data stack, sandboxed by bubblewrap "
                           "(needs the native provider)", language="python", provider="native",
                           env_allowlist=NATIVE_ENV),
    "node": Profile(description="native Node.js sandboxed by bubblewrap (needs the native provider)",
                    language="javascript", provider="native", env_allowlist=NATIVE_ENV),
    "bash": Profile(description="a shell and command-line tools sandboxed by bubblewrap "
                    "(needs the native provider)", language="bash", provider="native", env_allowlist=NATIVE_ENV),
}


class SessionPolicy(_Model):
    idle_timeout_s: Annotated[float, Field(gt=0)] = 600.0
    """Default: a kernel idle this long is dropped (files kept)."""
    ttl_s: Annotated[float, Field(gt=0)] = 86_400.0
    """Default: a session is removed, files and all, this long after creation."""
    max_idle_timeout_s: Annotated[float, Field(gt=0)] = 86_400.0
    max_ttl_s: Annotated[float, Field(gt=0)] = 30 * 86_400.0
    sweep_interval_s: Annotated[float, Field(gt=0)] = 15.0
    """How often idle kernels and expired sessions are looked for."""

    @model_validator(mode="after")
    def _defaults_within_maxima(self) -> SessionPolicy:
        if self.idle_timeout_s > self.max_idle_timeout_s or self.ttl_s > self.max_ttl_s:
            raise ValueError("the default idle timeout and TTL must not exceed their maxima")
        return self


class ServerSettings(_Model):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    data_dir: Path = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "wasm-runner"
    concurrency: Annotated[int, Field(ge=1, le=1024)] = os.cpu_count() or 2
    """Executions running at once (default: the number of cores)."""
    queue_size: Annotated[int, Field(ge=0)] = 64
    """Executions waiting for a slot; beyond it requests get 429."""
    queue_timeout_s: Annotated[float, Field(ge=0)] = 30.0
    """How long an execution may wait for a slot before it gets 429."""
    session_queue_size: Annotated[int, Field(ge=1)] = 16
    """Calls waiting for the same session; beyond it requests get 429."""
    max_body_bytes: Annotated[int, Field(ge=1024)] = 32 * MiB
    """Largest JSON request body."""
    max_file_bytes: Annotated[int, Field(ge=1)] = 256 * MiB
    """Largest file accepted by PUT or upload."""
    max_read_bytes: Annotated[int, Field(ge=1)] = 16 * MiB
    """Largest file read into memory (exec by path, edit, patch)."""
    max_output_files_bytes: Annotated[int, Field(ge=0)] = 16 * MiB
    """Total bytes of output files returned by a one-shot run."""
    file_op_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    """Time one glob, grep, edit, patch or one-shot output collection may take on the shared file
    workers (an archive: per chunk); past it 422 budget_exceeded (grep answers what it found)."""
    shutdown_timeout_s: Annotated[float, Field(ge=0)] = 30.0
    """How long in-flight requests may run on shutdown before they are cancelled."""
    prepare_on_start: bool = True
    """Warm the Python runtime at start-up (readiness waits for it)."""
    log_level: str = "INFO"
    access_log: bool = True
    """One structured line per request (at INFO)."""


class ServiceConfig(_Model):
    server: ServerSettings = ServerSettings()
    sessions: SessionPolicy = SessionPolicy()
    limits: LimitsSection = LimitsSection()
    auth: AuthSettings = AuthSettings()  # issue 5: keys, tenants, presigned links, audit
    default_profile: Annotated[str, Field(pattern=NAME_PATTERN)] = "python"
    profiles: dict[Annotated[str, Field(pattern=NAME_PATTERN)], Profile] = {}
    """Added to the built-ins; a profile named like a built-in replaces it."""

    @model_validator(mode="after")
    def _check(self) -> ServiceConfig:
        profiles = self.all_profiles()
        if self.default_profile not in profiles:
            raise ValueError(f"default_profile {self.default_profile!r} is not a profile")
        maxima = self.limits.max
        layers = [("limits.default", self.limits.default)] + [(f"profiles.{n}.limits", p.limits) for n, p in profiles.items()]
        for where, limits in layers:
            for name, value in limits.values().items():
                cap = getattr(maxima, name)
                if cap is not None and value > cap:
                    raise ValueError(f"{where}.{name} = {value} exceeds limits.max.{name} = {cap}")
        base = Limits(**self.limits.default.values())
        for name in base.__struct_fields__:
            value, cap = getattr(base, name), getattr(maxima, name)
            if cap is not None and value is not None and value > cap:
                raise ValueError(f"the default limit {name} = {value} exceeds limits.max.{name} = {cap}")
        return self

    def all_profiles(self) -> dict[str, Profile]:
        return {**BUILTIN_PROFILES, **self.profiles}

    def with_server(self, **changes) -> ServiceConfig:
        """A copy with server settings changed (flags and environment variables win over the file)."""
        changes = {k: v for k, v in changes.items() if v is not None}
        server = ServerSettings.model_validate({**self.server.model_dump(), **changes})
        return self.model_copy(update={"server": server})


def load_config(path: str | os.PathLike[str] | None) -> ServiceConfig:
    """The configuration in a TOML or JSON file (built-in defaults when `path` is None)."""
    if path is None:
        return ServiceConfig()
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".json":
        data = json.loads(raw)
    else:
        data = tomllib.loads(raw.decode("utf-8"))
    return ServiceConfig.model_validate(data)
