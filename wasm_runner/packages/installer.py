"""Installs into a session: resolve (uv, on the host), fetch (cache first, then the allowed index),
check (pure-Python wheels only, hash), unpack (once per workspace) and link into the session.

A failure is an `InstallResult` with an error naming the package and what to do, never an
exception; a failed install leaves the session's packages as they were before the failing
distribution.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import ssl
import time
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import Requirement

from wasm_runner.egress.policy import DEFAULT_PORTS, EgressRules, PolicyError
from wasm_runner.egress.proxy import EgressProxy
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.packages.cache import PackageCache
from wasm_runner.packages.download import Downloader
from wasm_runner.packages.grammar import checked_url, pinned_requirement
from wasm_runner.packages.redaction import sanitized
from wasm_runner.packages.resolution import Pin, RunAs, is_exact, parse_requirements, resolve
from wasm_runner.packages.session_dir import SessionPackages, normalise_name
from wasm_runner.packages.settings import GUEST_PYTHON_VERSION, PackageSettings
from wasm_runner.packages.wheels import WheelRefused, check_filename, check_metadata
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.packages import InstalledPackage, InstallResult, PackageError, PackageLock, PackageRequest

log = logging.getLogger("wasm_runner")

DEFAULT_CACHE = "default"
_CACHE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class PackageInstaller:
    """The host's installer for every session of a Runner; one cache per workspace name."""

    def __init__(self, settings: PackageSettings, data_dir: Path, *, run_as: RunAs | None = None) -> None:
        self.settings = settings
        self.run_as = run_as
        """How the resolver is started as an unprivileged user (None: as this process)."""
        self.cache_root = settings.cache_dir or data_dir / "package-cache"
        self.resolver = Resolver(settings.resolver_overrides)
        self._caches: dict[str, PackageCache] = {}
        self._trust: ssl.SSLContext | None = None
        self._proxy: EgressProxy | None = None

    @property
    def proxy(self) -> EgressProxy:
        """The egress proxy the resolver's connections go through (its thread starts on first use)."""
        if self._proxy is None:
            self._proxy = EgressProxy(EgressSettings(resolver=self.resolver))
        return self._proxy

    def trust(self) -> ssl.SSLContext:
        """The TLS trust of downloads, made once."""
        if self._trust is None:
            self._trust = trust(self.settings.ca_bundle)
        return self._trust

    def cache(self, workspace: str = DEFAULT_CACHE) -> PackageCache:
        if not _CACHE_NAME.match(workspace) or workspace in (".", ".."):
            raise ValueError(f"not a workspace name: {workspace!r}")
        cache = self._caches.get(workspace)
        if cache is None:
            cache = PackageCache(self.cache_root / workspace, self.settings.cache_quota_bytes,
                                 self.settings.max_unpacked_bytes)
            self._caches[workspace] = cache
        return cache

    def install(self, packages: SessionPackages, request: PackageRequest, *, policy: EgressPolicy | None = None,
                allow_custom_index: bool = False, workspace: str = DEFAULT_CACHE,
                max_bytes: int | None = None) -> InstallResult:
        """Install `request` into `packages`; `max_bytes` is what the install may add to the session (the
        room its workspace's disk quota leaves): a distribution past it is refused (`quota`)."""
        started = time.monotonic()
        installed: list[InstalledPackage] = []
        downloader: Downloader | None = None
        index = request.index or self.settings.python_index
        try:
            if request.npm:
                raise WheelRefused("unsupported_ecosystem", "npm packages are not installed by the host: they install "
                                   "inside the session's native sandbox, into its /workspace/node_modules",
                                   "run `npm install NAME` (or `bun install NAME`) in the session with a native profile "
                                   "(`node`, `bun`, `bash`) and a network policy other than deny: the operator's "
                                   "registry is the default, and later native calls of the session find the package")
            if request.index is not None:
                checked_url(request.index, what="index URL")
            if request.index and not allow_custom_index:
                raise WheelRefused("index_not_allowed", f"this profile takes packages from its configured index only, "
                                   f"not {request.index}", "leave out `index`, or use a profile that allows other indexes")
            settings = self.settings
            rules = EgressRules(policy if policy is not None else settings.default_policy(request.index))
            downloader = Downloader(rules, self.resolver, deadline=started + settings.max_install_s,
                                    budget_bytes=settings.max_install_bytes, verify=self.trust,
                                    within=None if allow_custom_index else EgressRules(settings.default_policy()))
            cache = self.cache(workspace)
            with cache.locked():
                if request.lock is not None:
                    # every field checked before anything is fetched or stored
                    pins = [Pin(p.name, p.version, p.filename, p.url, p.sha256, p.size).checked()
                            for p in request.lock.python]
                    if not allow_custom_index:
                        _check_configured_sources(pins, settings)
                else:
                    pins = self._resolve(packages, request, downloader, cache, started)
                new = [pin for pin in pins if not packages.has(pin)]
                for pin in new:
                    check_filename(pin.filename, pin.name)
                names = {normalise_name(p["name"]) for p in packages.installed()} | {normalise_name(p.name) for p in new}
                if len(names) > settings.max_packages:
                    raise WheelRefused("too_many_packages", f"the session would hold {len(names)} distributions, "
                                       f"more than its {settings.max_packages}", "start a new session, or raise "
                                       "packages.max_packages")
                room = max_bytes
                for pin in new:
                    placed, added = self._place(pin, packages, cache, downloader, room)
                    installed.append(placed)
                    room = None if room is None else room - added
                cache.evict(keep=frozenset(p.sha256 for p in pins))
        except WheelRefused as refused:
            log.info("an install into %s was refused: %s", packages.session_root, refused.message)
            return self._result(False, installed, started, downloader, packages, index,
                                PackageError(kind=refused.kind,  # type: ignore[arg-type]
                                             message=self._shown(refused.message, packages),
                                             hint=None if refused.hint is None else self._shown(refused.hint, packages),
                                             package=refused.package))
        except PolicyError as exc:
            return self._result(False, installed, started, downloader, packages, index,
                                PackageError(kind="denied_by_policy", message=self._shown(str(exc), packages)))
        except (OSError, ValueError) as exc:  # the host's side failed (a full disk, a damaged state file)
            log.exception("an install into %s failed on the host", packages.session_root)
            shown = self._shown(str(exc), packages)
            return self._result(False, installed, started, downloader, packages, index,
                                PackageError(kind="resolver_failed",
                                             message=f"the host could not complete the install: {shown}",
                                             hint="the session keeps what is listed as installed; retry, and if "
                                                  "it fails again the operator's log says why"))
        finally:
            if downloader is not None:
                downloader.close()
        return self._result(True, installed, started, downloader, packages, index, None)

    def _shown(self, text: str, packages: SessionPackages) -> str:
        """`text` for the caller: the cache and session named by label, any other host path hidden."""
        return sanitized(text, labels={str(self.cache_root): "<package cache>",
                                       str(packages.session_root): "<session>"})

    def _result(self, ok: bool, installed: list[InstalledPackage], started: float, downloader: Downloader | None,
                packages: SessionPackages, index: str, error: PackageError | None) -> InstallResult:
        try:
            lock = packages.lock(index)
        except (OSError, ValueError):  # a state file that cannot be read: the error says what failed
            lock = PackageLock(index=index)
        return InstallResult(ok=ok, installed=installed, error=error,
                             duration_ms=round((time.monotonic() - started) * 1000, 3),
                             index_requests=downloader.requests if downloader else 0, lock=lock)

    def _resolve(self, packages: SessionPackages, request: PackageRequest, downloader: Downloader,
                 cache: PackageCache, started: float) -> list[Pin]:
        """The pins for the request with what the session already holds; from the cache when the request
        is exact and was resolved before on the same indexes."""
        requirements = parse_requirements(request.python)
        if not requirements:
            return []
        asked = {normalise_name(r.name) for r in requirements}
        # the session's state file is checked again here: one written before its fields were checked
        # on the way in is refused, never passed on
        held = [pinned_requirement(pin.name, pin.version) for pin in map(Pin.from_dict, packages.installed())
                if normalise_name(pin.name) not in asked]
        indexes = self.settings.indexes(request.index)
        texts = sorted({str(r) for r in requirements}) + sorted(held)  # the resolution's cache key
        key = hashlib.sha256(json.dumps([indexes, texts, GUEST_PYTHON_VERSION]).encode()).hexdigest()
        exact = all(is_exact(r) for r in requirements)
        if exact:
            remembered = cache.resolution(key)
            if remembered is not None:
                return [Pin.from_dict(p) for p in remembered]
        for url in indexes:
            downloader.check(url)
        left = self.settings.max_install_s - (time.monotonic() - started)
        downloader.requests += 1  # a resolution asks the index (several requests, counted as one)
        pins = self._resolve_through_proxy(sorted(requirements, key=str), sorted(held), indexes, request.index,
                                           max(left, 1.0))
        for requirement in requirements:
            _check_satisfied(requirement, pins)
        if exact:
            cache.remember(key, [p.as_dict() for p in pins])
        return pins

    def _resolve_through_proxy(self, requirements: list[Requirement], held: list[str], indexes: tuple[str, ...],
                               requested_index: str | None, timeout_s: float) -> list[Pin]:
        """uv's answer, its every connection (index pages, file links, redirects) decided by the install
        policy: the configured indexes and file hosts (and an allowed requested index), nothing else."""
        rules = EgressRules(self.settings.default_policy(requested_index))
        # the egress byte cap, not the install's: uv reads index pages and whole wheels for their metadata
        run = self.proxy.open_loopback(rules, time.monotonic() + timeout_s + 5)
        try:
            assert run.url is not None
            return resolve(requirements, held, indexes, timeout_s=timeout_s, proxy=run.url, uv=self.settings.uv,
                           ca_bundle=str(self.settings.ca_bundle) if self.settings.ca_bundle else None,
                           run_as=self.run_as)
        except WheelRefused:
            refused = [event for event in run.network() if not event.allowed]
            if refused:
                log.warning("the resolver was refused %s", [(e.scheme, e.host, e.port, e.reason) for e in refused])
                first = refused[0]
                raise WheelRefused("denied_by_policy", f"the index led the resolver to {first.scheme}://{first.host}:"
                                   f"{first.port}, which the install policy does not allow ({first.reason})",
                                   "packages come from the operator's configured indexes and file hosts: ask the "
                                   "operator to add the file host (packages.file_hosts)") from None
            raise
        finally:
            self.proxy.close(run)

    def _place(self, pin: Pin, packages: SessionPackages, cache: PackageCache, downloader: Downloader,
               room: int | None) -> tuple[InstalledPackage, int]:
        """The distribution linked into the session, and the bytes it added there (its unpacked size)."""
        wheel = cache.artifact(pin.sha256)
        source = "cache"
        if wheel is not None:  # stored under its hash: still, it must be the distribution pinned
            check_metadata(wheel, pin.name, pin.version)
        else:
            downloader.check(pin.url, pin.name)
            if pin.size is not None:
                cache.evict(room_for=pin.size)
                if cache.usage() + pin.size > cache.quota_bytes:
                    raise WheelRefused("quota", f"{pin.filename} ({pin.size} bytes) does not fit the workspace's "
                                       f"package cache quota ({cache.quota_bytes} bytes)",
                                       "raise packages.cache_quota_bytes", pin.name)
            part = cache.scratch_file()
            try:
                downloader.fetch(pin.url, pin.sha256, part, pin.name)
                check_metadata(part, pin.name, pin.version)  # before it has a name in the cache
                wheel = cache.store(pin.sha256, part)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
            source = "download"
        tree, unpacked = cache.tree(pin.sha256, wheel)
        if source == "download":  # the index may publish no size: the quota is checked on what arrived
            cache.evict(keep=frozenset({pin.sha256}))
            if cache.usage() > cache.quota_bytes:
                cache.drop(pin.sha256)
                raise WheelRefused("quota", f"{pin.filename} does not fit the workspace's package cache quota "
                                   f"({cache.quota_bytes} bytes)", "raise packages.cache_quota_bytes", pin.name)
        if room is not None and unpacked.size > room:
            raise WheelRefused("quota", f"{pin.filename} unpacks to {unpacked.size} bytes, more than the "
                               f"{room} bytes the workspace's disk quota leaves", "delete files first, or ask for "
                               "a larger quota", pin.name)
        size = wheel.stat().st_size
        packages.place(pin, tree, unpacked.files, size)
        return InstalledPackage(name=pin.name, version=pin.version, sha256=pin.sha256, size=size,
                                source=source, filename=pin.filename), unpacked.size  # type: ignore[arg-type]


def trust(ca_bundle: Path | None) -> ssl.SSLContext:
    """The system's trusted CAs (as OpenSSL finds them: SSL_CERT_FILE / SSL_CERT_DIR included), plus the
    operator's extra bundle."""
    context = ssl.create_default_context()
    if ca_bundle is not None:
        context.load_verify_locations(cafile=str(ca_bundle))
    return context


def _check_configured_sources(pins: list[Pin], settings: PackageSettings) -> None:
    """A lock replayed where no other index is allowed downloads from the configured index and file
    hosts only, whatever else the session's network policy allows."""
    configured = EgressRules(settings.default_policy())
    for pin in pins:
        parts = urlsplit(pin.url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
        if not parts.hostname or configured.refusal(parts.scheme, parts.hostname, port) is not None:
            raise WheelRefused("index_not_allowed", f"the lock's {pin.filename} comes from {parts.scheme}://{parts.netloc}, "
                               f"not the configured index or its file hosts ({', '.join(configured.policy.allow)})",
                               "replay the lock in a session whose profile allows other indexes, or install the "
                               "packages by name", pin.name)


def _check_satisfied(requirement: Requirement, pins: list[Pin]) -> None:
    name = normalise_name(requirement.name)
    for pin in pins:
        if normalise_name(pin.name) == name:
            return
    raise WheelRefused("not_found", f"the resolver gave no {requirement.name}", package=requirement.name)
