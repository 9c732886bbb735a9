"""Execution profiles: named ways to run code, and how a request is resolved under one.

A profile sets the runtime (the language used when a request names none, and the
provider), limits, read-only mounts, an environment and the names a request may add
to it. The service (`POST /v1/exec`, sessions, batches) and `wasm-runner run --profile`
resolve requests here, so a profile means the same in both. Limits are layered: the
defaults (`[limits.default]`), then the profile, then the request; the result must
stay within the maxima (`[limits.max]`) or the request is refused (`ProfileError`)
rather than silently clamped.

A config file (TOML or JSON; the service's, which has more sections) may set:

    default_profile = "python"

    [limits.default]              # defaults under every profile
    timeout_s = 10
    [limits.max]                  # no request or profile may ask more
    timeout_s = 300

    [profiles.python-small]       # named profiles, added to (or replacing) the built-ins
    language = "python"
    limits = { timeout_s = 2, memory_bytes = 67108864 }
    env_allowlist = ["MY_*"]
    mounts = [{ host = "/srv/datasets", guest = "/data" }]

Built-in profiles: python, javascript, typescript (WebAssembly), and python-data, node,
typescript-native, bun, bash
(the native provider, where it is installed). Configuration is validated by pydantic.
"""

from __future__ import annotations

import fnmatch
import json
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import msgspec
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from wasm_runner.egress.credentials import check_credential
from wasm_runner.egress.policy import EgressRules, PolicyError
from wasm_runner.errors import InvalidRequestError
from wasm_runner.guest import Mount
from wasm_runner_protocol.egress import Credential, EgressMode, EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.execution import ExecRequest, Harness, Language, Limits, MiB, TypeCheck
from wasm_runner_protocol.guest import check_guest_path
from wasm_runner_protocol.wire import LimitsPatch

if TYPE_CHECKING:
    from wasm_runner.tools.mcp_source import McpTools

GiB = 1024 * MiB
NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
"""pydantic-core matches with Rust's regex, whose $ is the end of the text (no final-newline match)."""


class ConfigModel(BaseModel):
    """A section of the configuration: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsConfig(ConfigModel):
    """Partial limits: unset fields fall through to the next layer."""

    timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = None
    fuel: Annotated[int, Field(gt=0)] | None = None
    memory_bytes: Annotated[int, Field(ge=32 * MiB)] | None = None
    output_bytes: Annotated[int, Field(ge=0)] | None = None
    disk_bytes: Annotated[int, Field(ge=0)] | None = None
    disk_files: Annotated[int, Field(ge=0)] | None = None

    def values(self) -> dict[str, Any]:
        """The limits set (by name), as `Limits` takes them."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class MaxLimits(ConfigModel):
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


class LimitsSection(ConfigModel):
    default: LimitsConfig = LimitsConfig()
    max: MaxLimits = MaxLimits()


class MountConfig(ConfigModel):
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


class CredentialConfig(ConfigModel):
    """A secret the host adds to requests for `destinations` (read from the host's `env` or a `file`)."""

    destinations: list[str]
    header: str = "Authorization"
    template: str = "Bearer {secret}"
    env: str | None = None
    file: Path | None = None

    @model_validator(mode="after")
    def _check(self) -> CredentialConfig:
        check_credential(self.as_credential())
        return self

    def as_credential(self) -> Credential:
        return Credential(destinations=tuple(self.destinations), header=self.header, template=self.template,
                          env=self.env, file=None if self.file is None else str(self.file))


class McpServerConfig(ConfigModel):
    """An MCP server whose tools the profile's runs may call (code mode): a stdio `command` the host runs,
    or a streamable-HTTP `url`. Its credentials stay on the host: `env` (values, or names in `env_from`
    read from the host's environment) reaches the command only, `headers` the URL only."""

    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = {}
    env_from: list[str] = []
    """Names of the host's environment variables passed to the command (e.g. an API token)."""
    headers: dict[str, str] = {}
    prefix: str = ""
    """Put before each of its tool names (snake_case), to keep two servers' tools apart."""
    call_timeout_s: float = 60.0

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has a command (stdio) or a url (streamable HTTP), not both")
        if self.command is not None and not self.command:
            raise ValueError("an MCP server's command is not empty")
        return self

    def source(self) -> McpTools:
        """A connection to this server (started by `start()`), its credentials from this host's environment."""
        from wasm_runner.tools.mcp_source import McpTools

        return McpTools(command=self.command, url=self.url, env=self.environment(), headers=self.headers,
                        prefix=self.prefix, call_timeout_s=self.call_timeout_s)

    def environment(self) -> dict[str, str]:
        """What the command's process gets: `env`, the named host variables, and PATH."""
        merged = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        merged.update({name: os.environ[name] for name in self.env_from if name in os.environ})
        merged.update(self.env)
        return merged


class NetworkPolicyConfig(ConfigModel):
    """A network policy: `deny`, an `allowlist` of destinations, or `open` (any public destination:
    private and metadata addresses still need an entry naming them). A string ("deny", "open") is
    short for the mode alone."""

    mode: EgressMode = "deny"
    allow: list[str] = []

    @model_validator(mode="before")
    @classmethod
    def _mode_alone(cls, value: Any) -> Any:
        return {"mode": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_policy(self) -> NetworkPolicyConfig:
        if self.mode == "deny" and self.allow:
            raise ValueError("a deny policy takes no allow entries (use mode = \"allowlist\")")
        if self.mode == "allowlist" and not self.allow:
            raise ValueError("an allowlist needs at least one entry in allow")
        EgressRules(self.policy)  # every entry parses
        return self

    @property
    def policy(self) -> EgressPolicy:
        return EgressPolicy(mode=self.mode, allow=tuple(self.allow))

    @property
    def rules(self) -> EgressRules:
        return EgressRules(self.policy)


class NetworkConfig(NetworkPolicyConfig):
    """A profile's network: the policy its sessions and runs start with, the widest one a session's
    key holder may switch to (`session_max`), and the credentials the host adds."""

    credentials: list[CredentialConfig] = []
    session_max: NetworkPolicyConfig | None = None
    """The widest policy a session (or one run) may ask for, e.g. "open": the network stays off until
    the work needs it, and the caller turns it on without the operator. Null: the profile's own policy."""

    @model_validator(mode="after")
    def _within_max(self) -> NetworkConfig:
        if self.session_max is not None:
            wider = self.session_max.rules.wider_entries(self.policy, "session_max's")
            if wider is not None:
                raise ValueError(f"the profile's policy must lie within session_max: {wider}")
        return self

    @property
    def ceiling(self) -> EgressRules:
        """The widest policy a session or run of the profile may have."""
        return (self.session_max or self).rules


class PackagesConfig(ConfigModel):
    """What a profile's sessions may install from (the indexes themselves are the operator's)."""

    allow_custom_index: bool = False
    """A request may name another Python index (still checked against the network policy)."""


class Profile(ConfigModel):
    """A named way to run code: runtime, limits, mounts, environment, network."""

    description: str = ""
    language: Literal["python", "javascript", "typescript", "bash", "sh"] = "python"
    """The runtime: the language used when a request names none."""
    provider: Literal["wasm", "native"] | None = None
    """Who runs it; null routes by language (python/javascript/typescript -> wasm)."""
    limits: LimitsConfig = LimitsConfig()
    mounts: list[MountConfig] = []
    env: dict[str, str] = {}
    """Variables every run of this profile sees."""
    env_allowlist: list[str] = ["*"]
    """Names (fnmatch patterns) a request may set in `env`; others are refused."""
    network: NetworkConfig = NetworkConfig()
    """Where runs may connect, and the credentials the host adds (`deny` by default)."""
    packages: PackagesConfig = PackagesConfig()
    """Installs into sessions: their downloads may reach the configured indexes and what `network` allows."""
    tools: list[str] | None = None
    """Tool names this profile's runs may be given (code mode); a request offering another is refused.
    null: any; `[]`: none."""
    mcp_servers: list[McpServerConfig] = []
    """MCP servers whose tools every run of this profile may call (within `tools`)."""
    tool_call_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    """The longest a guest's tool call waits, its approval included (the run's deadline bounds it too)."""
    approval_tools: list[str] = []
    """Tool names (as guests call them, prefix included) each call of which waits for the session
    owner's approval (an `approval_required` event on the exec stream); MCP and caller-side tools alike."""

    def allows_env(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.env_allowlist)

    @property
    def mount_key(self) -> tuple[tuple[str, str], ...]:
        """The mounts as a sorted key: a Runner's mounts are fixed, so profiles with one key share a Runner."""
        return tuple(sorted((str(m.host), m.guest) for m in self.mounts))

    def runner_mounts(self) -> tuple[Mount, ...]:
        """The mounts of the Runner that runs this profile (`Runner(mounts=...)`)."""
        return tuple(Mount(Path(host), guest) for host, guest in self.mount_key)


OFF_UNTIL_ASKED = NetworkConfig(session_max=NetworkPolicyConfig(mode="open"))
"""The built-ins' network: off (deny) until a session's key holder switches it to an allowlist or to
`open` (public destinations only); an operator caps it by redefining the profile."""
NATIVE_TOOL_LIMITS = LimitsConfig(memory_bytes=1 * GiB)
"""Memory of the built-ins bash, node, typescript-native and bun: the 256 MiB default killed their tools.
Sized for the peaks measured in a sandbox (its cgroup's figure) of what such a session runs first:
`tsc --noEmit` on one file 275 MiB, a Vite + React build 70 MiB (160 MB RSS on a cold cache),
`pandoc x.md -o x.pdf` with WeasyPrint 63 MiB, ImageMagick PNG to PDF 68 MiB (its own policy caps it at
256 MiB). 1 GiB leaves room for a real project's type check and build; a limit, not a reservation. The
built-ins carrying it are lowered to the operator's `limits.max`.

python-data keeps the 256 MiB default: its peaks measured the same way are pandas, matplotlib, seaborn
and scikit-learn imported and a chart saved 144 MiB, WeasyPrint writing 50 pages 156 MiB, fastapi, flask
and uvicorn imported 168 MiB; and its kernels made ahead are started under the default (the memory limit
is part of a kernel's key: under another default a session's first call would start its own kernel).
A larger data set asks for `limits.memory_bytes`."""
NATIVE_ENV = ["LANG", "LC_*", "TZ", "TERM", "COLUMNS", "LINES", "PYTHON*", "NODE_ENV", "OMP_NUM_THREADS"]

BUILTIN_PROFILES: dict[str, Profile] = {
    "python": Profile(description="CPython in WebAssembly (WASI): fast fresh instances, persistent kernels",
                      language="python", network=OFF_UNTIL_ASKED),
    "javascript": Profile(description="JavaScript in WebAssembly (WASI)", language="javascript",
                          network=OFF_UNTIL_ASKED),
    "python-data": Profile(description="native CPython with the data stack, sandboxed by bubblewrap "
                           "(needs the native provider)", language="python", provider="native",
                           env_allowlist=NATIVE_ENV, network=OFF_UNTIL_ASKED),
    "node": Profile(description="native Node.js sandboxed by bubblewrap (needs the native provider)",
                    language="javascript", provider="native", limits=NATIVE_TOOL_LIMITS, env_allowlist=NATIVE_ENV,
                    network=OFF_UNTIL_ASKED),
    "typescript": Profile(description="TypeScript in WebAssembly (WASI): transpiled in the sandbox, run by QuickJS",
                          language="typescript", network=OFF_UNTIL_ASKED),
    "typescript-native": Profile(description="TypeScript run by native Node.js (type stripping), sandboxed by "
                                 "bubblewrap (needs the native provider and its JavaScript toolchain)",
                                 language="typescript", provider="native", limits=NATIVE_TOOL_LIMITS,
                                 env_allowlist=NATIVE_ENV, network=OFF_UNTIL_ASKED),
    "bun": Profile(description="TypeScript and JavaScript run by native bun, sandboxed by bubblewrap (needs the "
                   "native provider and its JavaScript toolchain)", language="typescript", provider="native",
                   env={"WASM_RUNNER_JS_RUNTIME": "bun"}, limits=NATIVE_TOOL_LIMITS, env_allowlist=NATIVE_ENV,
                   network=OFF_UNTIL_ASKED),
    "bash": Profile(description="a shell and command-line tools sandboxed by bubblewrap "
                    "(needs the native provider)", language="bash", provider="native", limits=NATIVE_TOOL_LIMITS,
                    env_allowlist=NATIVE_ENV, network=OFF_UNTIL_ASKED),
}


class ProfilesConfig(ConfigModel):
    """The execution part of a configuration: default and maximum limits, and the profiles."""

    limits: LimitsSection = LimitsSection()
    default_profile: Annotated[str, Field(pattern=NAME_PATTERN)] = "python"
    profiles: dict[Annotated[str, Field(pattern=NAME_PATTERN)], Profile] = {}
    """Added to the built-ins; a profile named like a built-in replaces it."""

    @model_validator(mode="after")
    def _check(self) -> ProfilesConfig:
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
        return {**{name: self._within_maxima(profile) for name, profile in BUILTIN_PROFILES.items()},
                **self.profiles}

    def _within_maxima(self, builtin: Profile) -> Profile:
        """A built-in profile's limits lowered to `limits.max` (an operator's maxima never make a built-in invalid)."""
        lowered = {name: min(value, cap) for name, value in builtin.limits.values().items()
                   if (cap := getattr(self.limits.max, name)) is not None and value > cap}
        if not lowered:
            return builtin
        return builtin.model_copy(update={"limits": builtin.limits.model_copy(update=lowered)})


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw settings of a TOML or JSON config file (JSON by its .json suffix)."""
    path = Path(path)
    raw = path.read_bytes()
    settings: dict[str, Any] = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    return settings


def load_profiles(path: str | os.PathLike[str] | None) -> ProfilesConfig:
    """The execution part of a config file (the built-ins when `path` is None); the file's
    other sections (the service's) are left to the service."""
    if path is None:
        return ProfilesConfig()
    data = read_config_file(path)
    return ProfilesConfig.model_validate({key: data[key] for key in ProfilesConfig.model_fields if key in data})


class ProfileError(InvalidRequestError):
    """A request its profile does not allow: an unknown profile, limits above the maxima,
    invalid limits, an environment variable not allowlisted. `code` is the stable error
    code (the service answers it with 422)."""

    def __init__(self, code: ErrorCode, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


class Profiles:
    """The profiles of one configuration, and requests resolved under them."""

    def __init__(self, config: ProfilesConfig = ProfilesConfig()) -> None:
        self.profiles = config.all_profiles()
        self.default_profile = config.default_profile
        self.base_limits = Limits(**config.limits.default.values())
        self.max_limits = config.limits.max
        self._profile_limits: dict[int, Limits] = {}
        """Resolved limits of each profile (the profiles are fixed for the configuration's life)."""

    def get(self, name: str | None) -> tuple[str, Profile]:
        """The profile named `name` (None: the default), with its name."""
        name = name or self.default_profile
        profile = self.profiles.get(name)
        if profile is None:
            raise ProfileError(ErrorCode.UNKNOWN_PROFILE, f"no profile named {name!r}",
                               f"available: {', '.join(sorted(self.profiles))}")
        return name, profile

    def limits(self, profile: Profile, patch: LimitsPatch | None) -> Limits:
        """The defaults, then the profile's limits, then the request's `patch`, within the maxima."""
        if patch is None:
            cached = self._profile_limits.get(id(profile))
            if cached is not None:
                return cached
        values: dict[str, Any] = {f: getattr(self.base_limits, f) for f in Limits.__struct_fields__}
        values.update(profile.limits.values())
        if patch is not None:
            for name in Limits.__struct_fields__:
                value = getattr(patch, name)
                if value is not msgspec.UNSET:
                    value_cap = getattr(self.max_limits, name)
                    if value is None and name == "fuel" and value_cap is not None:
                        raise ProfileError(ErrorCode.LIMIT_EXCEEDS_MAXIMUM, "unmetered fuel (null) is not allowed here",
                                           f"set limits.fuel to at most {value_cap}")
                    values[name] = value
        for name, value in values.items():
            cap = getattr(self.max_limits, name)
            if cap is not None and value is not None and value > cap:
                raise ProfileError(ErrorCode.LIMIT_EXCEEDS_MAXIMUM, f"limits.{name} = {value} exceeds the maximum {cap}",
                                   f"ask for at most {cap}")
        try:
            limits = Limits(**values)
        except (ValueError, TypeError) as exc:
            raise ProfileError(ErrorCode.INVALID_LIMITS, str(exc)) from None
        if patch is None:
            self._profile_limits[id(profile)] = limits
        return limits

    @staticmethod
    def env(profile: Profile, env: dict[str, str]) -> dict[str, str]:
        """The profile's environment plus the request's, whose names the profile must allow."""
        refused = sorted(name for name in env if not profile.allows_env(name))
        if refused:
            raise ProfileError(ErrorCode.ENV_NOT_ALLOWED, f"the profile does not allow setting {', '.join(refused)}",
                               f"allowed names: {', '.join(profile.env_allowlist) or 'none'}")
        return {**profile.env, **env}

    def request(self, profile: Profile, *, language: object, code: str | None, command: list[str] | None,
                stdin: str, env: dict[str, str], limits: LimitsPatch | None, fresh: bool, id: str | None,
                path_language: str | None = None, harness: Harness = "script", tests: str = "",
                network: EgressPolicy | None = None, typecheck: TypeCheck = False,
                typecheck_timeout_s: float = 60.0) -> ExecRequest:
        """The core request for these fields under `profile` (a command always runs natively)."""
        if language is msgspec.UNSET or language is None:
            language = path_language or profile.language
        resolved_env, resolved_limits = self.env(profile, env), self.limits(profile, limits)
        egress = self.egress(profile, network)
        try:
            return ExecRequest(
                code=code or "", language=cast(Language, language), command=command,  # (the wire's Language)
                provider="native" if command is not None else profile.provider,
                stdin=stdin, env=resolved_env, limits=resolved_limits, fresh=fresh, id=id,
                harness=harness, tests=tests, egress=egress,
                credentials=tuple(c.as_credential() for c in profile.network.credentials),
                typecheck=typecheck, typecheck_timeout_s=typecheck_timeout_s,
            )
        except ValueError as exc:  # a combination the request's own rules refuse (typecheck of Python)
            raise ProfileError(ErrorCode.VALIDATION_ERROR, str(exc)) from None

    @staticmethod
    def egress(profile: Profile, requested: EgressPolicy | None) -> EgressPolicy:
        """The profile's network policy, or the request's if it stays within the profile's ceiling."""
        if requested is None:
            return profile.network.policy
        try:
            return profile.network.ceiling.narrowed(requested)
        except PolicyError as exc:
            raise ProfileError(ErrorCode.NETWORK_NOT_ALLOWED, str(exc),
                               "a request may not go past its profile's network policy (or its session_max); "
                               "use a profile whose policy allows it") from None
