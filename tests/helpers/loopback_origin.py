"""Loopback HTTP and HTTPS servers standing in for the outside world in egress tests.

`Origin` serves a directory statically (a PEP 503 index, a bare git repository) plus a few
dynamic paths: /small, /big (BIG_BYTES), /echo-auth (the Authorization header it got, in the
body and in a response header), /redirect?to=URL (302), /slow?seconds=S (a byte every SLOW_STEP_S
for S seconds); a POST to /echo answers its body (the request's Content-Type in a header).
It records every request it received.
`TestCA` mints a CA and server certificates with `cryptography` for the HTTPS variant.
"""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

BIG_BYTES = 1024 * 1024
SLOW_STEP_S = 0.1
SMALL_BODY = b"hello from the origin\n"


class TestCA:
    """A throwaway CA (EC P-256) and server certificates it signs."""

    __test__ = False

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wasm-runner test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = directory / "test-ca.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def server_context(self, *names: str) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        cert_file = self.directory / f"{names[0]}.pem"
        key_file = self.directory / f"{names[0]}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        return context


class Origin:
    """A threaded loopback server; `requests` lists (method, path, headers) as received."""

    def __init__(self, root: Path, context: ssl.SSLContext | None = None) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        origin = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def log_message(self, *args) -> None:
                pass

            def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:
                origin.requests.append((self.command, self.path, dict(self.headers.items())))
                url = urlsplit(self.path)
                if url.path == "/small":
                    self._answer(200, SMALL_BODY)
                elif url.path == "/big":
                    self._answer(200, b"x" * BIG_BYTES)
                elif url.path == "/echo-auth":
                    auth = self.headers.get("Authorization", "")
                    self._answer(200, f"you sent: {auth}\n".encode(), {"X-Echo": auth})
                elif url.path == "/redirect":
                    self._answer(302, b"", {"Location": parse_qs(url.query)["to"][0]})
                elif url.path == "/slow":
                    self._drip(float(parse_qs(url.query).get("seconds", ["10"])[0]))
                else:
                    super().do_GET()

            def _drip(self, seconds: float) -> None:
                steps = max(1, int(seconds / SLOW_STEP_S))
                self.send_response(200)
                self.send_header("Content-Length", str(steps))
                self.end_headers()
                try:
                    for _ in range(steps):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(SLOW_STEP_S)
                except OSError:  # the client (the host, cutting at a deadline) went away
                    pass

            do_HEAD = do_GET

            def do_POST(self) -> None:
                origin.requests.append((self.command, self.path, dict(self.headers.items())))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(200, body, {"X-Content-Type": self.headers.get("Content-Type", "")})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if context is not None:
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, name="test-origin", daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
