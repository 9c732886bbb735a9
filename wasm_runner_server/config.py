"""Service configuration, validated by pydantic; the execution profiles are the core's (`wasm_runner.profiles`).

A config file (TOML or JSON) may set any of:

    default_profile = "python"

    [server]                      # see ServerSettings
    concurrency = 4
    queue_size = 64

    [sessions]                    # defaults and maxima for idle timeout and TTL
    idle_timeout_s = 600
    ttl_s = 86400

    [artifacts], [history]        # see wasm_runner_server/artifacts/settings.py
    [packages]                    # where session installs come from (see PackagesSection)
    python_index = "https://pypi.org/simple/"
    [workers]                     # see WorkerSettings: the processes hosting guests
    kernel_workers = 2
    [egress]                      # see EgressSection: how the host reaches what profiles allow
    max_bytes = 268435456
    [store]                       # see wasm_runner_server/metadata/settings.py: where the metadata lives
    url = "postgresql://wasm:secret@db:5432/wasm_runner"   # default "sqlite"; or WASM_RUNNER_STORE_URL
    [cluster]                     # see ClusterSettings: a Ray cluster for batches
    ray_address = "10.0.0.5:6379"
    [previews]                    # see PreviewSettings: the origin previews are served on
    domain = "preview.example.com"
    [e2b]                         # see wasm_runner_server/e2b/settings.py: the E2B-compatible API
    enabled = true
    [mcp]                         # see wasm_runner_server/mcp/settings.py: what a tool result may hold
    max_result_chars = 20000

    [limits.*], [profiles.*]      # as `wasm_runner.profiles` describes them

`wasm-runner run --config FILE` reads the same file's default_profile, [limits.*] and
[profiles.*].
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from yarl import URL

from wasm_runner.cluster import RayCluster
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.packages.settings import NPM_REGISTRY, PYPI_FILES, PYPI_SIMPLE, PackageSettings
from wasm_runner.profiles import ConfigModel, ProfilesConfig, read_config_file
from wasm_runner_protocol.execution import MiB
from wasm_runner_server.artifacts.settings import ArtifactSettings, HistorySettings
from wasm_runner_server.e2b.settings import E2bSettings
from wasm_runner_server.mcp.settings import McpSettings
from wasm_runner_server.metadata.settings import StoreSettings
from wasm_runner_server.security.settings import AuthSettings
from wasm_runner_server.storage.settings import StorageSettings


class SessionPolicy(ConfigModel):
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


class ServerSettings(ConfigModel):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    data_dir: Path = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "wasm-runner"
    concurrency: Annotated[int, Field(ge=1, le=1024)] = os.cpu_count() or 2
    """Executions running at once (default: the number of cores)."""
    queue_size: Annotated[int, Field(ge=0)] = 64
    """Executions waiting for a slot; beyond it requests get 429 with Retry-After (a workspace with none
    waiting may still queue one)."""
    workspace_queue_size: Annotated[int, Field(ge=0)] | None = None
    """Executions of one workspace waiting for a slot (default: `queue_size`); beyond it its requests get
    429 with Retry-After. Waiting calls are served in turn across workspaces, and across sessions within one."""
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
    public_url: str | None = None
    """The service's address as its clients reach it (`https://sandbox.example.com`, or with a path
    prefix a proxy strips: `https://example.com/wasm-runner`): every link the service hands out
    (presigned file and artifact links, terminal links, `Location` headers) is built on it. Default:
    the scheme and host of the request the link answers."""
    trust_forwarded: bool = False
    """Build links on `X-Forwarded-Proto` and `X-Forwarded-Host` when `public_url` is not set. Turn it
    on only behind a proxy that sets both (and drops them from its callers): anyone reaching the
    service directly could otherwise choose the address its links lead to."""

    @field_validator("public_url")
    @classmethod
    def _an_origin(cls, value: str | None) -> str | None:
        if value is None:
            return None
        url = URL(value)
        if url.scheme not in ("http", "https") or not url.host or url.user or url.password or url.query_string \
                or url.fragment:
            raise ValueError(f"public_url must be an http(s) URL with a host and an optional path (got {value!r})")
        return str(url).rstrip("/")  # links append their root-relative paths


class PackagesSection(ConfigModel):
    """Session package installs: the operator's indexes, the per-workspace cache and the limits."""

    python_index: str = PYPI_SIMPLE
    extra_indexes: list[str] = []
    file_hosts: list[str] = [PYPI_FILES]
    """Hosts the indexes serve their files from (reachable by installs like the indexes)."""
    npm_registry: str = NPM_REGISTRY
    """Where npm and bun in native sandboxes install from by default (allowed, like the Python indexes, to
    native runs whose network policy is not deny)."""
    cache_quota_bytes: Annotated[int, Field(ge=0)] = 2 * 1024 * MiB
    """Per workspace; least recently used artifacts are evicted past it."""
    shared_cache: bool = False
    """One cache for every workspace (public indexes only: nothing private to share)."""
    max_install_bytes: Annotated[int, Field(ge=1)] = 256 * MiB
    max_install_s: Annotated[float, Field(gt=0)] = 120.0
    max_packages: Annotated[int, Field(ge=1)] = 200
    """Distributions one session may hold."""
    ca_bundle: Path | None = None
    """An extra CA bundle the host trusts for index downloads."""
    resolver_overrides: dict[str, list[str]] = {}
    """Names answered without DNS (name -> addresses), for pinned or private indexes."""

    def settings(self) -> PackageSettings:
        return PackageSettings(python_index=self.python_index, extra_indexes=tuple(self.extra_indexes),
                               file_hosts=tuple(self.file_hosts), npm_registry=self.npm_registry,
                               cache_quota_bytes=self.cache_quota_bytes,
                               max_install_bytes=self.max_install_bytes, max_install_s=self.max_install_s,
                               max_packages=self.max_packages, ca_bundle=self.ca_bundle,
                               resolver_overrides={k: tuple(v) for k, v in self.resolver_overrides.items()})


class EgressSection(ConfigModel):
    """The operator's egress settings: how the host resolves, what it trusts and how much a run may
    move when a profile's network policy lets it out (the policies themselves are the profiles')."""

    max_bytes: Annotated[int, Field(ge=0)] = 256 * MiB
    """Bytes one run may move through the network, both ways together (a background process: each
    of its connections); a transfer past it is cut and the run told so."""
    connect_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    """How long the host waits for a destination to accept a connection (within the run's deadline)."""
    extra_ca_file: Path | None = None
    """A PEM bundle trusted besides the system's (an internal CA); native sandboxes trust it too."""
    resolver_overrides: dict[str, list[str]] = {}
    """Names answered without DNS (name -> addresses), like curl's --resolve. The policy still
    applies to the addresses: a private one is reachable only where an entry names it."""

    @model_validator(mode="after")
    def _usable(self) -> EgressSection:
        self.settings()  # a missing CA file or an override that is not an address is refused at start
        return self

    def settings(self) -> EgressSettings:
        return EgressSettings(resolver=Resolver(self.resolver_overrides), extra_ca_file=self.extra_ca_file,
                              max_bytes=self.max_bytes, connect_timeout_s=self.connect_timeout_s)


class WorkerSettings(ConfigModel):
    """The worker processes that host every guest (`wasm_runner.execution.kernel_workers`)."""

    kernel_workers: Annotated[int, Field(ge=0, le=256)] = max(1, os.cpu_count() or 1)
    """Processes hosting sessions' kernels, plus one spare; 0 runs kernels in the service's own
    process (a stuck guest then costs a thread, a crash the service)."""
    memory_bytes: Annotated[int | None, Field(ge=64 * MiB)] = 4096 * MiB
    """Memory ceiling of each worker process (cgroup where writable, else RLIMIT_DATA); null: none."""
    max_runs: Annotated[int, Field(ge=1)] = 100_000
    """Calls a worker serves before it is replaced (its sessions' kernels restart, files kept)."""
    max_rss_bytes: Annotated[int | None, Field(ge=64 * MiB)] = 3072 * MiB
    """Private resident size (RssAnon) at which a worker is replaced; null: never for its size."""


class ProcessSettings(ConfigModel):
    """Background processes, terminals and preview ports of sessions (native tier)."""

    max_live: Annotated[int, Field(ge=0, le=256)] = 8
    """Live processes (terminals included) per session; the next start is refused (0: none allowed)."""
    memory_bytes: Annotated[int, Field(ge=32 * MiB)] = 2048 * MiB
    """Total memory of a session's live processes (the sum of their limits; its cgroup where there is one)."""
    ring_bytes: Annotated[int, Field(ge=4096, le=16 * MiB)] = 1 * MiB
    """Default output kept per stream of a process (the oldest bytes dropped past it)."""
    pty_grace_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    """How long a terminal whose WebSocket closed keeps running (unless opened with keep=true) for a reattach."""
    stop_grace_s: Annotated[float, Field(ge=0, le=60)] = 2.0
    """Between TERM and KILL when a process is stopped (DELETE, session end, shutdown)."""


class PreviewSettings(ConfigModel):
    """Where previews (a session's server on a port) are served: never on the API's origin.

    Without a domain, a listener of its own on the API's bind address serves them at
    `http://{port}-{grant}.localhost:{port}` (browsers resolve `*.localhost` to loopback), every
    answer sandboxed to an opaque origin. With a domain (a wildcard DNS record and certificate in
    front of the service), the API's listener answers `{port}-{grant}.{domain}` with the preview.
    """

    domain: str | None = None
    """e.g. "preview.example.com": previews at {scheme}://{port}-{grant}.{domain}; null: own listener."""
    scheme: Literal["http", "https"] = "https"
    """The scheme browsers reach the preview domain with (the TLS in front of the service)."""
    port: Annotated[int | None, Field(ge=0, le=65535)] = None
    """The preview listener's port (no domain): null is the API's port + 1, 0 any free port."""

    @field_validator("domain")
    @classmethod
    def _domain_is_a_host_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        domain = value.strip(".").lower()
        if not re.fullmatch(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{2,63}", domain):
            raise ValueError(f"previews.domain must be a DNS name such as preview.example.com (got {value!r})")
        return domain


class ClusterSettings(ConfigModel):
    """A Ray cluster that POST /v1/batch hands its items to (the `ray` extra; `wasm_runner.cluster`)."""

    ray_address: str | None = None
    """'auto' (the cluster on this machine, else a local one), HOST:PORT of its head, or
    ray://HOST:PORT; null: batches run on this server's own workers. With an address, a batch
    runs on the cluster unless it asks `?cluster=false`."""
    max_in_flight: Annotated[int, Field(ge=1, le=100_000)] = 512
    """Items of one batch admitted at once on the cluster (each holds its workspace's quotas)."""
    chunk_items: Annotated[int, Field(ge=1, le=1024)] = 16
    """Items sent to a node in one call."""

    def cluster(self) -> RayCluster | None:
        if self.ray_address is None:
            return None
        return RayCluster(address=self.ray_address, chunk_items=self.chunk_items)


class ServiceConfig(ProfilesConfig):
    """Everything the service is configured with: its own sections plus the execution ones
    (limits, default_profile, profiles) that `ProfilesConfig` validates."""

    server: ServerSettings = ServerSettings()
    sessions: SessionPolicy = SessionPolicy()
    workers: WorkerSettings = WorkerSettings()
    auth: AuthSettings = AuthSettings()
    """API keys, tenants, presigned links, audit."""
    artifacts: ArtifactSettings = ArtifactSettings()
    """Published files: retention, size, download links (artifacts/settings.py)."""
    history: HistorySettings = HistorySettings()
    """Earlier versions of files written through the API, per session."""
    packages: PackagesSection = PackagesSection()
    egress: EgressSection = EgressSection()
    """How the host reaches the destinations profiles allow: byte cap, trust, pinned names."""
    processes: ProcessSettings = ProcessSettings()
    """Background processes, terminals and preview ports."""
    cluster: ClusterSettings = ClusterSettings()
    """A Ray cluster for batches."""
    store: StoreSettings = StoreSettings()
    """Where the metadata lives: SQLite in the data directory, or a PostgreSQL database shared by nodes."""
    storage: StorageSettings = StorageSettings()
    """Where sessions' files and kernel images are kept besides the node's disk (object storage)."""
    previews: PreviewSettings = PreviewSettings()
    """The origin previews are served on (a listener of their own, or a preview domain)."""
    e2b: E2bSettings = E2bSettings()
    """The E2B-compatible API (off by default)."""
    mcp: McpSettings = McpSettings()
    """The MCP server: how much text one tool result hands a model."""

    def with_server(self, **changes) -> ServiceConfig:
        """A copy with server settings changed (flags and environment variables win over the file)."""
        changes = {k: v for k, v in changes.items() if v is not None}
        server = ServerSettings.model_validate({**self.server.model_dump(), **changes})
        return self.model_copy(update={"server": server})


def load_config(path: str | os.PathLike[str] | None) -> ServiceConfig:
    """The configuration in a TOML or JSON file (built-in defaults when `path` is None)."""
    if path is None:
        return ServiceConfig()
    return ServiceConfig.model_validate(read_config_file(path))
