"""Downloads of package files by the host, to addresses the egress policy allows.

Each request (and each redirect) is planned first (`Resolver.plan`): the host connects to a
checked address only, naming the host in the Host header and TLS's server name, so that what was
checked and where the bytes come from cannot differ. Bytes past the budget or the deadline stop
the download; the file's sha256 must match the one the index published.
"""

from __future__ import annotations

import hashlib
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from wasm_runner.egress.policy import EgressRules
from wasm_runner.egress.resolver import Resolver
from wasm_runner.packages.wheels import WheelRefused

MAX_REDIRECTS = 5


class Downloader:
    def __init__(self, rules: EgressRules, resolver: Resolver, *, deadline: float, budget_bytes: int,
                 verify: Callable[[], ssl.SSLContext | bool] = lambda: True, within: EgressRules | None = None) -> None:
        self.rules, self.resolver = rules, resolver
        self.within = within
        """Sources every request and redirect must also be among (the configured indexes and file hosts,
        where a profile allows no other index), whatever else `rules` allows."""
        self.deadline, self.budget = deadline, budget_bytes
        self.requests = 0
        self._verify = verify
        self._client: httpx.Client | None = None
        """Made on the first download (a TLS context costs tens of ms; an install from the cache needs none)."""

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(verify=self._verify(), follow_redirects=False, trust_env=False)
        return self._client

    def check(self, url: str, package: str | None = None) -> None:
        """Refuse a URL the policy does not allow (before any request to it)."""
        self._plan(url, package)

    def _plan(self, url: str, package: str | None) -> tuple[str, str]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WheelRefused("index_not_allowed", f"not an http(s) URL: {url}", package=package)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if self.within is not None and self.within.refusal(parts.scheme, parts.hostname, port) is not None:
            raise WheelRefused("index_not_allowed", f"{parts.scheme}://{parts.hostname}:{port} is not the configured "
                               f"index or one of its file hosts ({', '.join(self.within.policy.allow)})",
                               "ask the operator to add the host to packages.file_hosts", package=package)
        plan = self.resolver.plan(self.rules, parts.scheme, parts.hostname, port)
        if not plan.allowed:
            raise WheelRefused("denied_by_policy", f"{parts.scheme}://{parts.hostname}:{port} is not allowed by the "
                               f"session's network policy: {plan.refusal}",
                               "allow the index (and its file host) in the profile's network policy, or use the "
                               "operator's configured index", package=package)
        address = str(plan.addresses[0])
        netloc = f"[{address}]" if ":" in address else address
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), parts.hostname

    def fetch(self, url: str, sha256: str, into: Path, package: str) -> int:
        """Download `url` into `into`, checking its hash; the bytes written."""
        for _ in range(MAX_REDIRECTS + 1):
            target, host = self._plan(url, package)
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise WheelRefused("timeout", f"the install ran out of time before downloading {package}", package=package)
            headers = {"Host": urlsplit(url).netloc.rsplit("@", 1)[-1]}
            extensions = {"sni_hostname": host} if url.startswith("https:") else {}
            self.requests += 1
            try:
                with self.client.stream("GET", target, headers=headers, extensions=extensions,
                                         timeout=httpx.Timeout(min(left, 30.0))) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise WheelRefused("download_failed", f"{url} answered {response.status_code}", package=package)
                    return self._write(response, sha256, into, package, url)
            except httpx.HTTPError as exc:
                raise WheelRefused("download_failed", f"downloading {url} failed: {exc}", package=package) from None
        raise WheelRefused("download_failed", f"{url}: more than {MAX_REDIRECTS} redirects", package=package)

    def _write(self, response: httpx.Response, sha256: str, into: Path, package: str, url: str) -> int:
        digest = hashlib.sha256()
        written = 0
        with open(into, "wb") as out:
            for chunk in response.iter_bytes(1 << 16):
                written += len(chunk)
                if written > self.budget:
                    raise WheelRefused("too_large", f"the install's downloads passed its {self.budget} bytes "
                                       f"(at {package})", "raise packages.max_install_bytes, or install fewer "
                                       "packages at once", package=package)
                if time.monotonic() > self.deadline:
                    raise WheelRefused("timeout", f"downloading {package} passed the install's time limit",
                                       package=package)
                digest.update(chunk)
                out.write(chunk)
        self.budget -= written
        if digest.hexdigest() != sha256:
            raise WheelRefused("hash_mismatch", f"{url}: sha256 {digest.hexdigest()} is not the {sha256} "
                               "the index or lock names", package=package)
        return written
