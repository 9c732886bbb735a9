"""The host's egress proxy for native sandboxes: an HTTP forward proxy with CONNECT tunnels.

Each run gets a Unix socket of its own (`EgressProxy.open`), bridged into its network namespace
by a relay (providers/native/egress_relay.py), so whatever arrives on it is that run's: its
policy, its credentials, its byte cap and its deadline. An owner that lives for days (a
background process) has its cap applied to each of its connections instead, and its policy can
be replaced while it runs (`ProxyRun.set_rules`: the connections made from then on follow it). Every request (plain HTTP, absolute
form) and every tunnel (CONNECT) is decided by the same rules by name and by resolved address
(`Resolver.plan`): the proxy connects only to addresses it checked, so what the guest names and
where the host connects cannot differ, and each redirect the guest follows is a new, checked
request. A refusal is a 403 whose reason phrase (what pip, npm and git print) and body name the
policy, the destination and how to lift it (hints.refusal_summary), with a `Proxy-Status`
header (RFC 9209) carrying the reason. Each decision becomes a `NetworkEvent`.

Brokered credentials are added to plain-HTTP requests only: a tunnel's content is TLS between
the guest and the destination, which the proxy does not terminate. Secrets reflected in a
response (status line, headers or body, as sent or encoded: egress/masking.py) are masked byte
for byte before the guest sees it; brokered requests ask for an uncompressed response, and a
compressed one is decoded before the masking (or withheld when the host cannot decode it).

One asyncio loop on a daemon thread serves every run of a process; h11 parses HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import h11

from wasm_runner.egress.credentials import CredentialBroker, MissingSecretError
from wasm_runner.egress.masking import BodyDecoder, DecodedTooLarge, Masker, UndecodableBody
from wasm_runner.egress.policy import EgressRules, PolicyError, normalise_host
from wasm_runner.egress.resolver import Plan
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.hints import reason_phrase, refusal_summary
from wasm_runner_protocol.egress import Credential, NetworkEvent

READ_BYTES = 65536
MAX_HEAD_BYTES = 64 * 1024
SOCKET_NAME = "proxy.sock"
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
                        b"proxy-authenticate", b"te", b"trailer", b"transfer-encoding", b"upgrade"})
PROXY_NAME = "wasm-runner-egress"
PROXY_USER = "run"
MAX_HELD_EVENTS = 10_000
"""Decisions a run holds until they are taken; past it the oldest are dropped (and counted), so an
owner that runs for days and is never asked keeps bounded memory."""
Outgoing = h11.Request | h11.InformationalResponse | h11.Response | h11.Data | h11.EndOfMessage


class _Stop(Exception):
    """The exchange ends here for the reason given (a cap, the deadline, a failed upstream)."""


@dataclass
class ProxyRun:
    """One run's socket on the proxy, and the decisions made for it."""

    path: Path | None
    """The run's Unix socket (None: it listens on loopback TCP, `address`)."""
    rules: EgressRules
    broker: CredentialBroker
    deadline: float
    """time.monotonic() after which every connection of the run is cut."""
    max_bytes: int
    events: list[tuple[float, NetworkEvent]] = field(default_factory=list)
    bytes_total: int = 0
    server: asyncio.AbstractServer | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    secrets: tuple[str, ...] = ()
    """Every secret this run's credentials can add: what responses hide (egress/masking.py)."""
    closed: bool = False
    on_close: Callable[[], None] | None = None
    per_connection: bool = False
    """`max_bytes` bounds each guest connection rather than the run as a whole."""
    on_record: Callable[[int], None] | None = None
    """Told how many decisions are held after each new one (on the proxy's thread): to take them in batches."""
    dropped: int = 0
    """Decisions dropped, oldest first, because MAX_HELD_EVENTS were held and none taken."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    address: tuple[str, int] | None = None
    """Where a loopback TCP run listens (`EgressProxy.open_loopback`)."""
    url: str | None = None
    """A loopback run's proxy URL, with its credentials (for the tool's HTTP(S)_PROXY)."""
    authorization: bytes | None = None
    """The Proxy-Authorization every request must carry (a loopback run: other local processes can connect)."""
    forwarding: int = 0
    """Plain-HTTP requests being relayed (their decision is recorded as each one ends)."""
    idle: threading.Condition = field(default_factory=threading.Condition)

    @contextmanager
    def relaying(self) -> Iterator[None]:
        """Count one plain-HTTP request for `settle` while it is relayed."""
        with self.idle:
            self.forwarding += 1
        try:
            yield
        finally:
            with self.idle:
                self.forwarding -= 1
                self.idle.notify_all()

    def settle(self, timeout: float) -> None:
        """Wait (up to `timeout` s) for the plain-HTTP requests in flight to be recorded: a guest can
        read a response's last byte before the proxy's thread records it. Tunnels are not waited
        for: one kept alive across a kernel's calls would hold every call."""
        with self.idle:
            self.idle.wait_for(lambda: self.forwarding == 0, timeout)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def take(self, size: int) -> int:
        """How many of `size` bytes the run's cap still lets through (counted)."""
        allowed = max(min(size, self.max_bytes - self.bytes_total), 0)
        self.bytes_total += allowed
        return allowed

    def record(self, started: float, event: NetworkEvent) -> None:
        event.duration_ms = round((time.monotonic() - started) * 1000, 3)
        with self.lock:
            self.events.append((started, event))
            if len(self.events) > MAX_HELD_EVENTS:
                del self.events[0]
                self.dropped += 1
            held = len(self.events)
        if self.on_record is not None:
            self.on_record(held)

    def network(self) -> list[NetworkEvent]:
        """The run's decisions in the order they began."""
        with self.lock:
            events = list(self.events)
        return [event for _, event in sorted(events, key=lambda pair: pair[0])]

    def take_events(self) -> list[NetworkEvent]:
        """The decisions made since the last take, in the order they began (each is given once)."""
        with self.lock:
            events, self.events = self.events, []
        return [event for _, event in sorted(events, key=lambda pair: pair[0])]

    def set_rules(self, rules: EgressRules) -> None:
        """Decide the connections made from now on by `rules` (those open keep going)."""
        self.rules = rules

    def renew(self, rules: EgressRules, credentials: Sequence[Credential], deadline: float) -> None:
        """Serve the next call of an owner that outlives its calls (a kernel): that call's policy,
        credentials and deadline, its decisions and bytes counted afresh."""
        self.broker = CredentialBroker(credentials)
        self.secrets = tuple(self.broker.sensitive())
        self.rules, self.deadline = rules, deadline
        with self.lock:
            self.events = []
        self.bytes_total = 0


class EgressProxy:
    """Serves every run's socket from one event loop on a daemon thread (started on first use)."""

    def __init__(self, settings: EgressSettings | None = None) -> None:
        self.settings = settings or EgressSettings()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="wasm-egress-proxy", daemon=True).start()
                self._loop = loop
            return self._loop

    def open(self, rules: EgressRules, credentials: Sequence[Credential], deadline: float, directory: Path,
             owner: tuple[int, int] | None = None, per_connection: bool = False) -> ProxyRun:
        """Listen on `directory`/proxy.sock for one run (`owner`: the uid/gid that may connect;
        `per_connection`: the byte cap bounds each connection, not the run)."""
        broker = CredentialBroker(credentials)
        run = ProxyRun(directory / SOCKET_NAME, rules, broker, deadline, self.settings.max_bytes,
                       secrets=tuple(broker.sensitive()), per_connection=per_connection)
        loop = self._running_loop()
        asyncio.run_coroutine_threadsafe(self._listen(run, owner), loop).result(timeout=10)
        return run

    def open_loopback(self, rules: EgressRules, deadline: float, max_bytes: int | None = None) -> ProxyRun:
        """Listen on 127.0.0.1 (a free port) for one host-side tool (the package resolver), which reaches
        it as `http://<user>:<token>@127.0.0.1:<port>` (`ProxyRun.url`): a request without the run's
        random credentials is answered 407, so another local process cannot borrow the run's policy."""
        token = secrets.token_urlsafe(24)
        run = ProxyRun(None, rules, CredentialBroker(()), deadline,
                       self.settings.max_bytes if max_bytes is None else max_bytes,
                       authorization=b"Basic " + base64.b64encode(f"{PROXY_USER}:{token}".encode()))
        loop = self._running_loop()
        asyncio.run_coroutine_threadsafe(self._listen_loopback(run), loop).result(timeout=10)
        assert run.address is not None
        run.url = f"http://{PROXY_USER}:{token}@{run.address[0]}:{run.address[1]}"
        return run

    def close(self, run: ProxyRun) -> list[NetworkEvent]:
        """Stop serving `run` (its open connections are cut) and give its decisions."""
        if not run.closed and self._loop is not None and not self._loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self._close(run), self._loop).result(timeout=10)
            except (TimeoutError, RuntimeError):
                pass
        run.closed = True
        if run.path is not None:
            try:
                run.path.unlink()
            except OSError:
                pass
        return run.network()

    def _connections(self, run: ProxyRun) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        """The connection handler of `run`'s listener: each connection is a task the run can cancel."""
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            run.tasks.add(task)
            try:
                await Exchange(self.settings, run, reader, writer).serve()
            finally:
                run.tasks.discard(task)

        return serve

    async def _listen(self, run: ProxyRun, owner: tuple[int, int] | None) -> None:
        assert run.path is not None
        run.server = await asyncio.start_unix_server(self._connections(run), path=str(run.path), limit=MAX_HEAD_BYTES)
        if owner is not None:
            os.chown(run.path, *owner)
        os.chmod(run.path, 0o600)

    async def _listen_loopback(self, run: ProxyRun) -> None:
        run.server = await asyncio.start_server(self._connections(run), host="127.0.0.1", port=0, limit=MAX_HEAD_BYTES)
        host, port = run.server.sockets[0].getsockname()[:2]
        run.address = (host, port)

    async def _close(self, run: ProxyRun) -> None:
        run.closed = True
        if run.server is not None:
            run.server.close()
        for task in list(run.tasks):
            task.cancel()
        if run.tasks:
            await asyncio.wait(list(run.tasks), timeout=5)


def proxy_status(error: str, details: str) -> str:
    """A Proxy-Status header value (RFC 9209)."""
    quoted = details.replace("\\", "\\\\").replace('"', '\\"')
    return f'{PROXY_NAME}; error={error}; details="{quoted}"'


def refusal_text(rules: EgressRules, scheme: str, host: str, port: int, reason: str) -> str:
    """The body of a refusal: the destination, why, the policy, and how to allow it."""
    policy = rules.policy
    allowed = ", ".join(policy.allow) if policy.allow else "no entries"
    return (f"{refusal_summary(policy.mode, scheme, host, port, reason)}\n"
            f"{PROXY_NAME}: refused {scheme}://{host}:{port}: {reason}.\n"
            f"The run's network policy is {policy.mode} (allow: {allowed}).\n"
            f"To allow it, add \"{host}\" (or \"{host}:{port}\") to the profile's network.allow, "
            f"or run with --allow-net {host}:{port} where the profile permits it.\n")


def error_kind(plan: Plan) -> str:
    reason = plan.refusal or ""
    if "does not resolve" in reason or "has no address" in reason:
        return "dns_error"
    if plan.addresses:
        return "destination_ip_prohibited"
    return "http_request_denied"


class Exchange:
    """One guest connection to the proxy: HTTP requests in sequence, or one tunnel."""

    def __init__(self, settings: EgressSettings, run: ProxyRun, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.settings = settings
        self.run = run
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.moved = 0
        """Bytes this connection moved, both ways (what a per-connection cap counts)."""

    def take(self, size: int) -> int:
        """How many of `size` bytes the cap still lets through (counted): the run's, or this connection's."""
        if not self.run.per_connection:
            return self.run.take(size)
        allowed = max(min(size, self.run.max_bytes - self.moved), 0)
        self.moved += allowed
        self.run.bytes_total += allowed
        return allowed

    async def serve(self) -> None:
        try:
            while not self.run.closed:
                event = await self._next(self.conn, self.reader)
                if not isinstance(event, h11.Request):
                    break
                if self.run.authorization is not None and not self._authorized(event):
                    await self._answer(407, f"{PROXY_NAME}: this proxy serves one run: give its credentials\n",
                                       proxy_status("http_request_denied", "no or wrong Proxy-Authorization"))
                    break
                if event.method == b"CONNECT":
                    await self.tunnel(event)
                    break
                with self.run.relaying():
                    forwarded = await self.forward(event)
                if not forwarded:
                    break
                if self.conn.our_state is not h11.DONE or self.conn.their_state is not h11.DONE:
                    break
                self.conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await self._answer(400, f"{PROXY_NAME}: not an HTTP request this proxy understands ({exc})\n",
                                   proxy_status("http_request_error", str(exc)))
        except (TimeoutError, OSError, asyncio.CancelledError, h11.LocalProtocolError, _Stop):
            pass
        finally:
            self.writer.close()

    def _authorized(self, request: h11.Request) -> bool:
        given = [value for name, value in request.headers if name == b"proxy-authorization"]
        expected = self.run.authorization or b""
        return len(given) == 1 and hmac.compare_digest(given[0], expected)

    # -- reading and writing -------------------------------------------------------------------

    async def _next(self, conn: h11.Connection, reader: asyncio.StreamReader) -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self._read(reader)
            conn.receive_data(data)

    async def _read(self, reader: asyncio.StreamReader) -> bytes:
        remaining = self.run.remaining()
        if remaining <= 0:
            raise _Stop("the run's deadline passed")
        try:
            return await asyncio.wait_for(reader.read(READ_BYTES), remaining)
        except TimeoutError:
            raise _Stop("the run's deadline passed") from None

    async def _send(self, *events: Outgoing) -> None:
        for event in events:
            data = self.conn.send(event)
            if data:
                self.writer.write(data)
        await self.writer.drain()

    async def _answer(self, status: int, body: str, status_header: str, reason: str = "") -> None:
        data = body.encode()
        await self._send(h11.Response(status_code=status, reason=reason.encode("ascii"), headers=[
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(data)).encode()),
            (b"proxy-status", status_header.encode("ascii", "replace")), (b"connection", b"close")]),
            h11.Data(data=data), h11.EndOfMessage())

    async def _refuse(self, plan: Plan, started: float, method: str | None) -> None:
        reason = plan.refusal or "refused"
        self.run.record(started, NetworkEvent(
            allowed=False, host=plan.host, port=plan.port, scheme=plan.scheme, method=method,
            address=str(plan.addresses[0]) if plan.addresses else None, status=403, reason=reason))
        await self._answer(403, refusal_text(self.run.rules, plan.scheme, plan.host, plan.port, reason),
                           proxy_status(error_kind(plan), reason), reason_phrase(self.run.rules.policy.mode, plan.host))

    async def _plan(self, scheme: str, host: str, port: int) -> Plan:
        return await asyncio.to_thread(self.settings.resolver.plan, self.run.rules, scheme, host, port)

    async def _connect(self, plan: Plan) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
        last = "no address"
        for address in plan.addresses:
            timeout = min(self.settings.connect_timeout_s, self.run.remaining())
            if timeout <= 0:
                raise _Stop("the run's deadline passed")
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(str(address), plan.port), timeout)
                return reader, writer, str(address)
            except TimeoutError:
                last = f"{address}: no answer within {timeout:.1f} s"
            except OSError as exc:
                last = f"{address}: {exc.strerror or exc}"
        raise _Stop(f"could not connect to {plan.host}:{plan.port} ({last})")

    # -- CONNECT ---------------------------------------------------------------------------

    async def tunnel(self, request: h11.Request) -> None:
        started = time.monotonic()
        event = await self._next(self.conn, self.reader)  # the request's end (CONNECT has no body)
        if not isinstance(event, h11.EndOfMessage):
            return
        target = request.target.decode("ascii", "replace")
        try:
            host, port = split_authority(target)
        except PolicyError as exc:
            await self._answer(400, f"{PROXY_NAME}: {exc}\n", proxy_status("http_request_error", str(exc)))
            return
        plan = await self._plan("https", host, port)
        if not plan.allowed:
            await self._refuse(plan, started, None)
            return
        record = NetworkEvent(allowed=True, host=plan.host, port=port, scheme="https")
        try:
            upstream_reader, upstream_writer, record.address = await self._connect(plan)
        except _Stop as stop:
            record.status, record.reason = 502, str(stop)
            self.run.record(started, record)
            await self._answer(502, f"{PROXY_NAME}: {stop}\n", proxy_status("destination_unavailable", str(stop)))
            return
        if self.run.broker.credentials and self.run.broker.headers_for("https", plan.host, port):
            record.reason = ("a credential is bound to this destination but is added to plain-HTTP requests only; "
                             "the tunnel was relayed without it")
        sent = Counter()
        received = Counter()
        try:
            await self._send(h11.Response(status_code=200, reason=b"Connection established", headers=[]))
            record.status = 200
            leftover, _ = self.conn.trailing_data
            if leftover:
                await self._pass(leftover, upstream_writer, sent)
            outcome = await self._relay(self.reader, upstream_writer, upstream_reader, self.writer, sent, received)
            if outcome:
                record.reason = outcome
        finally:
            # Also when the run's end cuts the tunnel (the task cancelled): what passed until then.
            record.bytes_sent, record.bytes_received = sent.total, received.total
            upstream_writer.close()
            self.run.record(started, record)

    async def _pass(self, data: bytes, writer: asyncio.StreamWriter, counter: Counter) -> None:
        allowed = self.take(len(data))
        counter.total += allowed
        writer.write(data[:allowed])
        await writer.drain()
        if allowed < len(data):
            raise _Stop(self.cap_reason())

    def cap_reason(self) -> str:
        scope = "connection" if self.run.per_connection else "run"
        return (f"stopped at the {scope}'s network cap ({self.run.max_bytes} bytes both ways: the operator's "
                "egress max_bytes)")

    async def _relay(self, guest_reader: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter,
                     upstream_reader: asyncio.StreamReader, guest_writer: asyncio.StreamWriter,
                     sent: Counter, received: Counter) -> str | None:
        """Copies both ways until both ends are done, the cap is reached or the deadline passes."""
        async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counter: Counter) -> None:
            while True:
                data = await reader.read(READ_BYTES)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                await self._pass(data, writer, counter)

        tasks = [asyncio.ensure_future(copy(guest_reader, upstream_writer, sent)),
                 asyncio.ensure_future(copy(upstream_reader, guest_writer, received))]
        reason: str | None = None
        try:
            pending = set(tasks)
            while pending:
                remaining = self.run.remaining()
                if remaining <= 0:
                    reason = "cut at the run's deadline"
                    break
                done, pending = await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    exc = task.exception()
                    if isinstance(exc, _Stop):
                        reason = str(exc)
                        pending = set()
                    elif exc is not None:
                        pending = set()
        finally:
            for task in tasks:
                task.cancel()
        return reason

    # -- plain HTTP ------------------------------------------------------------------------

    async def forward(self, request: h11.Request) -> bool:
        """Relay one absolute-form request; False when the guest connection must close."""
        started = time.monotonic()
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            detail = ("https:// URLs go through CONNECT (set HTTPS_PROXY)" if url.scheme == "https"
                      else "send the absolute http:// URL (this is a forward proxy)")
            await self._answer(400, f"{PROXY_NAME}: cannot relay {target!r}: {detail}\n",
                               proxy_status("http_request_error", detail))
            return False
        try:
            port = url.port or 80
            host = normalise_host(url.hostname)
        except (ValueError, PolicyError) as exc:
            await self._answer(400, f"{PROXY_NAME}: {exc}\n", proxy_status("http_request_error", str(exc)))
            return False
        plan = await self._plan("http", host, port)
        if not plan.allowed:
            await self._refuse(plan, started, method)
            return False
        record = NetworkEvent(allowed=True, host=plan.host, port=port, scheme="http", method=method)
        try:
            added = self.run.broker.headers_for("http", plan.host, port)
        except MissingSecretError as exc:
            record.status, record.reason = 502, str(exc)
            self.run.record(started, record)
            await self._answer(502, f"{PROXY_NAME}: {exc}\n", proxy_status("proxy_internal_error", str(exc)))
            return False
        record.credential = bool(added)
        try:
            upstream_reader, upstream_writer, record.address = await self._connect(plan)
        except _Stop as stop:
            record.status, record.reason = 502, str(stop)
            self.run.record(started, record)
            await self._answer(502, f"{PROXY_NAME}: {stop}\n", proxy_status("destination_unavailable", str(stop)))
            return False
        try:
            return await self._exchange(request, url_path(target), plan, port, added, record,
                                        upstream_reader, upstream_writer)
        except _Stop as stop:
            record.reason = str(stop)
            return False
        finally:
            upstream_writer.close()
            self.run.record(started, record)

    async def _exchange(self, request: h11.Request, path: str, plan: Plan, port: int, added: dict[str, str],
                        record: NetworkEvent, upstream_reader: asyncio.StreamReader,
                        upstream_writer: asyncio.StreamWriter) -> bool:
        upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        replaced = {name.lower().encode() for name in added}
        authority = plan.host if port == 80 else f"{plan.host}:{port}"
        if ":" in plan.host:
            authority = f"[{plan.host}]" if port == 80 else f"[{plan.host}]:{port}"
        headers = [(b"host", authority.encode())]
        headers += [(name, value) for name, value in request.headers
                    if name not in HOP_BY_HOP and name != b"host" and name not in replaced
                    and not (added and name == b"accept-encoding")]
        headers += [(name.encode(), value.encode()) for name, value in added.items()]
        if added:
            headers.append((b"accept-encoding", b"identity"))
        framing = [(n, v) for n, v in request.headers if n in (b"content-length", b"transfer-encoding")]
        if any(n == b"transfer-encoding" for n, _ in framing):
            headers.append((b"transfer-encoding", b"chunked"))

        async def to_upstream(*events: Outgoing) -> None:
            for event in events:
                data = upstream.send(event)
                if data:
                    allowed = self.take(len(data))
                    record.bytes_sent += allowed
                    upstream_writer.write(data[:allowed])
                    if allowed < len(data):
                        raise _Stop(self.cap_reason())
            await upstream_writer.drain()

        await to_upstream(h11.Request(method=request.method, target=path.encode(), headers=headers))
        while True:  # the request's body, as it arrives
            event = await self._next(self.conn, self.reader)
            if isinstance(event, h11.Data):
                await to_upstream(h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await to_upstream(h11.EndOfMessage())
                break
            else:
                return False
        masker = Masker((*self.run.secrets, *added.values()))
        while True:
            event = await self._next(upstream, upstream_reader)
            if isinstance(event, h11.InformationalResponse):
                continue
            if not isinstance(event, h11.Response):
                raise _Stop("the destination closed the connection without an answer")
            break
        record.status = event.status_code
        record.bytes_received += self.take(len(event.reason) + sum(len(n) + len(v) + 4 for n, v in event.headers))
        response_headers = [(masker.mask(name), masker.mask(value)) for name, value in event.headers
                            if name not in HOP_BY_HOP]  # a secret may be reflected in a header's name too
        decoder: BodyDecoder | None = None
        coding = b", ".join(value for name, value in event.headers if name == b"content-encoding")
        if masker and BodyDecoder.needed(coding.decode("latin-1")):
            try:  # the masking must see the body as the destination wrote it
                decoder = BodyDecoder(coding.decode("latin-1"), self.run.max_bytes)
            except UndecodableBody as exc:
                record.reason = str(exc)
                await self._answer(502, f"{PROXY_NAME}: {exc}\n", proxy_status("http_response_content_coding",
                                                                               str(exc)))
                return False
            response_headers = [(name, value) for name, value in response_headers
                                if name not in (b"content-encoding", b"content-length")]
        await self._send(h11.Response(status_code=event.status_code, reason=masker.mask(event.reason),
                                      headers=response_headers))
        while True:
            event = await self._next(upstream, upstream_reader)
            if isinstance(event, h11.Data):
                allowed = self.take(len(event.data))
                record.bytes_received += allowed
                data = self._decoded(decoder, event.data[:allowed])
                data = masker.feed(data)
                if data:
                    await self._send(h11.Data(data=data))
                if allowed < len(event.data):  # what the masker still holds is dropped: it may end in a secret's start
                    raise _Stop(self.cap_reason())
            elif isinstance(event, h11.EndOfMessage):
                tail = masker.feed(self._decoded(decoder, None)) + masker.flush()
                if tail:
                    await self._send(h11.Data(data=tail))
                await self._send(h11.EndOfMessage())
                return True
            else:
                raise _Stop("the destination closed the connection mid-answer")

    @staticmethod
    def _decoded(decoder: BodyDecoder | None, data: bytes | None) -> bytes:
        """`data` decoded (None: the body is over); a body the host cannot decode ends the exchange."""
        if decoder is None:
            return data or b""
        try:
            return decoder.feed(data) if data is not None else decoder.flush()
        except (UndecodableBody, DecodedTooLarge) as exc:
            raise _Stop(str(exc)) from None


class Counter:
    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0


def split_authority(target: str) -> tuple[str, int]:
    """CONNECT's host:port (IPv6 in brackets); PolicyError when it is not one."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise PolicyError(f"CONNECT needs host:port, not {target!r}")
    return normalise_host(host.strip("[]")), int(port)


def url_path(target: str) -> str:
    """The origin-form target of an absolute-form request (path and query)."""
    url = urlsplit(target)
    path = url.path or "/"
    return f"{path}?{url.query}" if url.query else path
