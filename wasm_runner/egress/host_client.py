"""The host's HTTP client for WASI guests: requests a guest asks for, made by the host.

A WASI guest has no sockets. Its HTTP library (http.client / urllib.request in Python, fetch in
JavaScript) hands each request to the host through an import; the host resolves the name
itself, checks the policy on the address it is about to connect to (`Resolver.plan`), adds the
run's brokered credentials, and connects with urllib3 (one pool manager per process, shared by
its runs; TLS verified against the system's trust store plus the operator's extra CA). Every
redirect the host follows is a new, checked request; redirects the guest follows are new
requests too. The run's byte cap counts request and response bodies both ways, and every wait
ends at the run's deadline. Each request becomes one `NetworkEvent`.

Secrets never flow back: the headers the host added are not in what the guest sees, and a
response echoing a secret (status line, headers, body; as sent or encoded: egress/masking.py)
is masked byte for byte; a compressed body is decoded first (or withheld when the host cannot
decode it). A request the guest sends without a User-Agent goes out as `wasm-runner`.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from wasm_runner.egress.credentials import CredentialBroker, MissingSecretError
from wasm_runner.egress.masking import BodyDecoder, DecodedTooLarge, Masker, UndecodableBody
from wasm_runner.egress.policy import DEFAULT_PORTS, EgressRules, PolicyError, normalise_host
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.errors import WasmRunnerError
from wasm_runner.hints import LIMIT_HINT, allow_hint
from wasm_runner_protocol.egress import Credential, EgressPolicy, NetworkEvent

if TYPE_CHECKING:  # imported where used: most runs make no request, and it takes ~40 ms
    import urllib3

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 20
FIRST_CHUNK = 64 * 1024
"""Bytes of the body sent with the response's head: a small answer takes one call."""
DROPPED_REQUEST_HEADERS = frozenset({"host", "connection", "keep-alive", "proxy-connection", "proxy-authorization",
                                     "te", "trailer", "transfer-encoding", "upgrade", "content-length"})
DROPPED_RESPONSE_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                                      "trailer", "transfer-encoding", "upgrade"})
"""urllib3 undoes the transfer coding; the guest gets the body as sent, its length or its end."""
CROSS_ORIGIN_DROPPED = frozenset({"authorization", "cookie", "proxy-authorization"})
"""Headers the guest set that a redirect to another origin does not carry (as browsers do)."""
USER_AGENT = "wasm-runner"
"""Sent when the guest names none (rather than the host library's own name and version)."""


class EgressError(WasmRunnerError):
    """A request the host did not complete; `kind` tells the guest's library which error to raise."""

    kind = "failed"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class EgressRefused(EgressError):
    """The policy refused the destination (by name or by resolved address)."""

    kind = "denied"


class EgressLimit(EgressError):
    """The run's byte cap or deadline stopped the request."""

    kind = "limit"


class HostClient:
    """urllib3's pools and the TLS trust of one process, for every run it serves."""

    def __init__(self, settings: EgressSettings | None = None) -> None:
        self.settings = settings or EgressSettings()
        self._lock = threading.Lock()
        self._pools: urllib3.PoolManager | None = None

    def pools(self) -> urllib3.PoolManager:
        """Made on first use: a TLS context costs tens of milliseconds, and most runs make no request."""
        import urllib3

        with self._lock:
            if self._pools is None:
                context = ssl.create_default_context()
                if self.settings.extra_ca_file is not None:
                    context.load_verify_locations(cafile=str(self.settings.extra_ca_file))
                self._pools = urllib3.PoolManager(num_pools=64, maxsize=8, ssl_context=context, retries=False)
            return self._pools

    def open(self, policy: EgressPolicy, credentials: Sequence[Credential], deadline: float) -> HostRun:
        return HostRun(self, EgressRules(policy), CredentialBroker(credentials), deadline)

    def close(self) -> None:
        with self._lock:
            if self._pools is not None:
                self._pools.clear()
                self._pools = None


@dataclass
class Exchange:
    """One response being read by the guest."""

    response: urllib3.BaseHTTPResponse
    event: NetworkEvent
    started: float
    masker: Masker
    decoder: BodyDecoder | None = None
    handle: int = 0
    done: bool = False


@dataclass
class Answer:
    """The head of a response and its first bytes (`eof`: nothing more to read)."""

    handle: int
    status: int
    reason: str
    headers: list[tuple[str, str]]
    url: str
    redirected: bool
    body: bytes
    eof: bool


@dataclass
class HostRun:
    """One execution's requests: its policy, credentials, cap, deadline and decisions."""

    client: HostClient
    rules: EgressRules
    broker: CredentialBroker
    deadline: float
    events: list[NetworkEvent] = field(default_factory=list)
    bytes_total: int = 0
    exchanges: dict[int, Exchange] = field(default_factory=dict)
    next_handle: int = 1

    @property
    def settings(self) -> EgressSettings:
        return self.client.settings

    # -- the guest's calls -------------------------------------------------------------

    def request(self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes,
                follow: bool = False) -> Answer:
        """Send one request (and, with `follow`, the redirects it leads to), each checked."""
        method = method.upper()
        guest_headers = [(str(n), str(v)) for n, v in headers if str(n).lower() not in DROPPED_REQUEST_HEADERS]
        origin = _origin(url)
        for hop in range(MAX_REDIRECTS + 1):
            exchange = self._send(method, url, guest_headers, body)
            status = exchange.response.status
            location = exchange.response.headers.get("location")
            if not (follow and status in REDIRECTS and location):
                return self._answer(exchange, url, redirected=hop > 0)
            self._finish(exchange, drain=True)
            url = urljoin(url, location)
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = ("GET" if method != "HEAD" else method), b""
                guest_headers = [(n, v) for n, v in guest_headers if n.lower() != "content-type"]
            if _origin(url) != origin:
                guest_headers = [(n, v) for n, v in guest_headers if n.lower() not in CROSS_ORIGIN_DROPPED]
        raise EgressError(f"more than {MAX_REDIRECTS} redirects, the last to {url}")

    def read(self, handle: int, size: int) -> tuple[bytes, bool]:
        """Up to `size` more bytes of a response, and whether it is over."""
        exchange = self.exchanges.get(handle)
        if exchange is None:
            return b"", True
        return self._read(exchange, max(1, min(size, 1 << 20)))

    def release(self, handle: int) -> None:
        exchange = self.exchanges.get(handle)
        if exchange is not None:
            self._finish(exchange)

    def close(self) -> list[NetworkEvent]:
        """End every response still open; the run's decisions, in order."""
        for exchange in list(self.exchanges.values()):
            if exchange.event.reason is None and self.remaining() <= 0:  # the guest was stopped mid-read
                exchange.event.reason = "cut at the run's deadline"
            self._finish(exchange)
        return self.events

    # -- the work ---------------------------------------------------------------------

    def refusal(self, event: NetworkEvent) -> str:
        """What the guest is told: the destination, why, and the policy."""
        policy = self.rules.policy
        allowed = ", ".join(policy.allow) or "no entries"
        return (f"the host refused {_where(event)}: {event.reason} (network policy {policy.mode}, "
                f"allow: {allowed})")

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def cap_reason(self) -> str:
        return (f"stopped at the run's network cap ({self.settings.max_bytes} bytes both ways: the operator's "
                "egress max_bytes)")

    def _take(self, size: int) -> int:
        allowed = max(min(size, self.settings.max_bytes - self.bytes_total), 0)
        self.bytes_total += allowed
        return allowed

    def _record(self, event: NetworkEvent, started: float) -> None:
        event.duration_ms = round((time.monotonic() - started) * 1000, 3)
        self.events.append(event)

    def _send(self, method: str, url: str, guest_headers: list[tuple[str, str]], body: bytes) -> Exchange:
        import urllib3
        started = time.monotonic()
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        try:
            host = normalise_host(parts.hostname or "")
            port = parts.port or DEFAULT_PORTS.get(scheme, 0)
        except (ValueError, PolicyError) as exc:
            raise EgressError(f"{url!r} is not a URL the host can fetch: {exc}") from None
        if not host or scheme not in DEFAULT_PORTS:
            event = NetworkEvent(allowed=False, host=host or url, port=port, scheme=scheme or "?", method=method,
                                 reason=f"the scheme {scheme!r} is not allowed (http and https are)")
            self._record(event, started)
            raise EgressRefused(self.refusal(event), _hint(event))
        plan = self.settings.resolver.plan(self.rules, scheme, host, port)
        event = NetworkEvent(allowed=plan.allowed, host=plan.host, port=port, scheme=scheme, method=method,
                             address=str(plan.addresses[0]) if plan.addresses else None)
        if not plan.allowed:
            event.reason = plan.refusal
            self._record(event, started)
            raise EgressRefused(self.refusal(event), _hint(event))
        try:
            added = self.broker.headers_for(scheme, plan.host, port)
        except MissingSecretError as exc:
            event.reason = str(exc)
            self._record(event, started)
            raise EgressError(str(exc)) from None
        event.credential = bool(added)
        replaced = {name.lower() for name in added}
        authority = plan.host if ":" not in plan.host else f"[{plan.host}]"
        if port != DEFAULT_PORTS[scheme]:
            authority += f":{port}"
        headers = urllib3.HTTPHeaderDict()
        headers.add("Host", authority)
        for name, value in guest_headers:
            if name.lower() not in replaced and not (added and name.lower() == "accept-encoding"):
                headers.add(name, value)
        for name, value in added.items():
            headers.add(name, value)
        if "user-agent" not in headers:
            headers["User-Agent"] = USER_AGENT
        if added:  # the masking must see the body as sent
            headers["Accept-Encoding"] = "identity"
        if self._take(len(body)) < len(body):
            event.reason = self.cap_reason()
            self._record(event, started)
            raise EgressLimit(f"{scheme}://{plan.host}:{port}: {event.reason}", LIMIT_HINT)
        event.bytes_sent = len(body)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        remaining = self.remaining()
        if remaining <= 0:
            event.reason = "the run's deadline passed"
            self._record(event, started)
            raise EgressLimit(f"{scheme}://{plan.host}:{port}: {event.reason}")
        timeout = urllib3.Timeout(connect=min(self.settings.connect_timeout_s, remaining), read=remaining)
        failure: Exception | None = None
        for address in plan.addresses:
            kwargs = {"server_hostname": plan.host, "assert_hostname": plan.host} if scheme == "https" else {}
            pool = self.client.pools().connection_from_host(str(address), port, scheme, pool_kwargs=kwargs)
            try:
                response = pool.urlopen(method, path, body=body if body or method in ("POST", "PUT", "PATCH") else None,
                                        headers=headers, redirect=False, retries=False, preload_content=False,
                                        decode_content=False, assert_same_host=False, timeout=timeout,
                                        release_conn=False)
            except urllib3.exceptions.HTTPError as exc:
                failure = exc
                continue
            event.address, event.status = str(address), response.status
            masker = Masker((*self.broker.sensitive(), *added.values()))
            exchange = Exchange(response, event, started, masker, handle=self.next_handle)
            self.next_handle += 1
            self.exchanges[exchange.handle] = exchange
            coding = response.headers.get("content-encoding")
            if masker and BodyDecoder.needed(coding):
                try:  # the masking must see the body as the destination wrote it
                    exchange.decoder = BodyDecoder(coding or "", self.settings.max_bytes)
                except UndecodableBody as exc:
                    event.reason = str(exc)
                    self._finish(exchange)
                    raise EgressError(f"{scheme}://{plan.host}:{port}: {exc}") from None
            return exchange
        reason = _failure_text(failure)
        event.reason = reason
        self._record(event, started)
        if "timed out" in reason and self.remaining() <= 0:
            raise EgressLimit(f"{scheme}://{plan.host}:{port}: cut at the run's deadline")
        raise EgressError(f"{scheme}://{plan.host}:{port}: {reason}")

    def _answer(self, exchange: Exchange, url: str, redirected: bool) -> Answer:
        response = exchange.response
        dropped = DROPPED_RESPONSE_HEADERS | ({"content-encoding", "content-length"} if exchange.decoder else set())
        mask = exchange.masker.mask
        headers = [(mask(name.encode("latin-1", "replace")).decode("latin-1"),  # a name may reflect it too
                    mask(value.encode("latin-1", "replace")).decode("latin-1"))
                   for name, value in response.headers.iteritems() if name.lower() not in dropped]
        exchange.event.bytes_received += self._take(sum(len(n) + len(v) + 4 for n, v in headers))
        reason = exchange.masker.mask((response.reason or "").encode("latin-1", "replace")).decode("latin-1")
        body, eof = self._read(exchange, FIRST_CHUNK)
        return Answer(handle=exchange.handle, status=response.status, reason=reason,
                      headers=headers, url=url, redirected=redirected, body=body, eof=eof)

    def _read(self, exchange: Exchange, size: int) -> tuple[bytes, bool]:
        import urllib3
        if exchange.done:
            return b"", True
        remaining = self.remaining()
        if remaining <= 0:
            exchange.event.reason = "cut at the run's deadline"
            self._finish(exchange)
            raise EgressLimit(f"{_where(exchange.event)}: cut at the run's deadline")
        # What has arrived, waiting no longer than the deadline: read(size) would wait for `size`
        # bytes, so a server that drips its answer would hold the guest past it.
        connection = getattr(exchange.response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            sock.settimeout(remaining)
        try:
            data = exchange.response.read1(size)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            exchange.event.reason = _failure_text(exc)
            self._finish(exchange)
            if self.remaining() <= 0:
                raise EgressLimit(f"{_where(exchange.event)}: cut at the run's deadline") from None
            raise EgressError(f"{_where(exchange.event)}: {exchange.event.reason}") from None
        allowed = self._take(len(data))
        exchange.event.bytes_received += allowed
        if allowed < len(data):
            exchange.event.reason = self.cap_reason()
            self._finish(exchange)
            raise EgressLimit(f"{_where(exchange.event)}: {exchange.event.reason}", LIMIT_HINT)
        eof = not data or exchange.response.closed or _is_over(exchange.response)
        if exchange.decoder is not None:
            try:
                data = exchange.decoder.feed(data) + (exchange.decoder.flush() if eof else b"")
            except (UndecodableBody, DecodedTooLarge) as exc:
                exchange.event.reason = str(exc)
                self._finish(exchange)
                raise EgressError(f"{_where(exchange.event)}: {exc}") from None
        data = exchange.masker.feed(data)
        if eof:
            data += exchange.masker.flush()
            self._finish(exchange)
        return data, eof

    def _finish(self, exchange: Exchange, drain: bool = False) -> None:
        import urllib3
        if exchange.done:
            return
        exchange.done = True
        self.exchanges.pop(exchange.handle, None)
        response = exchange.response
        try:
            if drain and _is_over(response) is False and self.remaining() > 0:
                response.drain_conn()
            response.release_conn() if _is_over(response) else response.close()
        except (urllib3.exceptions.HTTPError, OSError):
            pass
        self._record(exchange.event, exchange.started)


def _is_over(response: urllib3.BaseHTTPResponse) -> bool:
    """The whole body was read (the connection can serve another request)."""
    length = getattr(response, "length_remaining", None)
    return bool(length == 0)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
    except ValueError:
        return parts.scheme.lower(), "", None


def _where(event: NetworkEvent) -> str:
    return f"{event.scheme}://{event.host}:{event.port}"


def _failure_text(exc: BaseException | None) -> str:
    """What went wrong reaching a destination, said plainly (urllib3 nests the cause)."""
    import urllib3
    if exc is None:
        return "no address to connect to"
    cause: BaseException = exc
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        cause = reason
    if isinstance(cause, urllib3.exceptions.SSLError) or isinstance(cause, ssl.SSLError):
        return f"TLS verification failed: {cause}"
    if isinstance(cause, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return "timed out"
    if isinstance(cause, urllib3.exceptions.NewConnectionError):
        return f"connection failed: {str(cause).split(': ', 1)[-1]}"
    if isinstance(cause, urllib3.exceptions.ProtocolError):
        return f"the destination broke the connection: {cause}"
    return str(cause) or type(cause).__name__


def _hint(event: NetworkEvent) -> str:
    return allow_hint(event)
