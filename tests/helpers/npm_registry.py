"""A minimal npm registry on loopback: packuments and tarballs of packages the test builds; it counts requests.

A packument (GET /<name>) lists each version with its tarball URL, sha1 `shasum` and sha512
`integrity`, as npm and bun check them; GET /<name>/-/<file>.tgz serves the tarball. The tarball
URLs name `public_url` (a name the test resolves to this server through the egress proxy).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import unquote


def build_tarball(name: str, version: str, files: dict[str, str], dependencies: dict[str, str] | None = None) -> bytes:
    """An npm package tarball: `package/package.json` plus `files` under `package/`."""
    manifest = {"name": name, "version": version, "main": "index.js", "dependencies": dependencies or {}}
    entries = {"package/package.json": json.dumps(manifest).encode(),
               **{f"package/{path}": text.encode() for path, text in files.items()}}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, data in entries.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class NpmPackage:
    name: str
    version: str
    tarball: bytes
    dependencies: dict[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name.rsplit('/', 1)[-1]}-{self.version}.tgz"


@dataclass
class LocalRegistry:
    url: str
    """Where this process reaches it (loopback address and port)."""
    port: int
    requests: list[str] = field(default_factory=list)

    def public(self, host: str) -> str:
        return f"http://{host}:{self.port}/"


@contextmanager
def serve_registry(packages: list[NpmPackage], public_host: str, host: str = "127.0.0.1") -> Iterator[LocalRegistry]:
    """Serve `packages`; their tarball URLs name `public_host` and the server's port."""
    by_name: dict[str, list[NpmPackage]] = {}
    for package in packages:
        by_name.setdefault(package.name, []).append(package)
    registry: LocalRegistry

    def packument(name: str) -> bytes:
        versions = {}
        for package in by_name[name]:
            integrity = "sha512-" + base64.b64encode(hashlib.sha512(package.tarball).digest()).decode()
            versions[package.version] = {
                "name": name, "version": package.version, "dependencies": package.dependencies,
                "dist": {"tarball": f"{registry.public(public_host)}{name}/-/{package.filename}",
                         "shasum": hashlib.sha1(package.tarball).hexdigest(), "integrity": integrity}}  # noqa: S324 - npm's own field
        latest = by_name[name][-1].version
        return json.dumps({"name": name, "dist-tags": {"latest": latest}, "versions": versions}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            registry.requests.append(self.path)
            path = unquote(self.path.split("?")[0]).lstrip("/")
            if "/-/" in path:
                name, filename = path.split("/-/", 1)
                for package in by_name.get(name, []):
                    if package.filename == filename:
                        return self._send(200, package.tarball, "application/octet-stream")
            elif path in by_name:
                return self._send(200, packument(path), "application/json")
            self._send(404, b'{"error":"not found"}', "application/json")

        def do_POST(self) -> None:  # noqa: N802 - npm's audit and bun's security calls: not served here
            registry.requests.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(404, b'{"error":"not found"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    port = server.server_address[1]
    registry = LocalRegistry(f"http://{host}:{port}", port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()


def demo_packages() -> list[NpmPackage]:
    """`leftpad-lite` 1.0.0 (needs `pad-core`) and `pad-core` 2.0.0."""
    core = "module.exports = (s, n) => ' '.repeat(Math.max(0, n - String(s).length)) + s;\n"
    app = "const pad = require('pad-core');\nmodule.exports = (s) => '[' + pad(s, 5) + ']';\n"
    return [NpmPackage("pad-core", "2.0.0", build_tarball("pad-core", "2.0.0", {"index.js": core})),
            NpmPackage("leftpad-lite", "1.0.0",
                       build_tarball("leftpad-lite", "1.0.0", {"index.js": app}, {"pad-core": "^2.0.0"}),
                       {"pad-core": "^2.0.0"})]
