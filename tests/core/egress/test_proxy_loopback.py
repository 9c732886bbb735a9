"""The proxy's loopback listener for host-side tools (the package resolver): its run's credentials are
required, and its policy decides every connection, a file link to a forbidden port included."""

from __future__ import annotations

import time

import httpx
from package_index import demo_wheels, recorder, serve_index

from wasm_runner.egress.policy import EgressRules
from wasm_runner.egress.proxy import EgressProxy
from wasm_runner_protocol.egress import EgressPolicy


def test_a_loopback_run_needs_its_credentials_and_follows_its_policy(tmp_path):
    proxy = EgressProxy()
    with serve_index(demo_wheels(tmp_path / "wheels")) as index, recorder() as forbidden:
        run = proxy.open_loopback(EgressRules(EgressPolicy(mode="allowlist", allow=(index.url,))), time.monotonic() + 30)
        try:
            assert run.url is not None and run.address is not None
            anonymous = f"http://{run.address[0]}:{run.address[1]}"
            with httpx.Client(proxy=anonymous, trust_env=False) as client:
                assert client.get(index.simple + "tinydep/").status_code == 407
            with httpx.Client(proxy=run.url.replace("@", "x@"), trust_env=False) as client:
                assert client.get(index.simple + "tinydep/").status_code == 407
            assert index.requests == []
            with httpx.Client(proxy=run.url, trust_env=False) as client:
                allowed = client.get(index.simple + "tinydep/")
                refused = client.get(f"http://127.0.0.1:{forbidden.port}/files/x.whl")
            assert allowed.status_code == 200 and "tinydep-2.0" in allowed.text
            assert refused.status_code == 403 and forbidden.connections == []
        finally:
            events = proxy.close(run)
    assert [(e.allowed, e.port) for e in events] == [(True, int(index.url.rsplit(":", 1)[1])), (False, forbidden.port)]


def test_settle_waits_for_a_request_in_flight_to_be_recorded():
    """A guest can read a response's last byte before the proxy records its decision: a kernel call's
    end settles the run first, so the call's decisions include every request it made."""
    import threading

    from wasm_runner_protocol.egress import NetworkEvent

    proxy = EgressProxy()
    run = proxy.open_loopback(EgressRules(EgressPolicy(mode="allowlist", allow=("example.test:80",))),
                              time.monotonic() + 30)
    try:
        entered = threading.Event()

        def relay() -> None:
            with run.relaying():
                entered.set()
                time.sleep(0.3)
                run.record(time.monotonic(), NetworkEvent(allowed=True, host="example.test", port=80, scheme="http"))

        thread = threading.Thread(target=relay)
        thread.start()
        entered.wait(5)
        assert run.network() == []
        run.settle(10)
        assert [e.host for e in run.network()] == ["example.test"]
        thread.join()
    finally:
        proxy.close(run)


def test_a_tunnel_cut_by_the_runs_end_still_counts_its_bytes():
    """A run can end while its HTTPS tunnel is still open (the program exited, the sandbox went):
    the cut tunnel's event says what passed until then, not zero."""
    import base64
    import socket
    import socketserver
    import threading
    from urllib.parse import urlsplit

    class Echo(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            while data := self.request.recv(4096):
                self.request.sendall(data)

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) as echo:
        threading.Thread(target=echo.serve_forever, daemon=True).start()
        port = echo.server_address[1]
        proxy = EgressProxy()
        run = proxy.open_loopback(EgressRules(EgressPolicy(mode="allowlist", allow=(f"127.0.0.1:{port}",))),
                                  time.monotonic() + 30)
        assert run.url is not None and run.address is not None
        parts = urlsplit(run.url)
        token = base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode()
        with socket.create_connection(run.address, timeout=10) as client:
            client.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           f"Proxy-Authorization: Basic {token}\r\n\r\n".encode())
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            client.sendall(b"x" * 1000)
            echoed = b""
            while len(echoed) < 1000:
                echoed += client.recv(4096)
            events = proxy.close(run)  # the tunnel is still open: the run's end cuts it
        echo.shutdown()
    [event] = events
    assert (event.allowed, event.scheme, event.status) == (True, "https", 200)
    assert (event.bytes_sent, event.bytes_received) == (1000, 1000)
