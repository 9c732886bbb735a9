"""A PEP 503 package index on loopback, serving wheels (and source distributions) the test builds; it
counts its requests. `extra_links` adds links of the test's choosing to a project's page (a file on
another host or port), `redirects` answers a file's path with a 302 to another URL; `Recorder`
is a loopback listener that records every connection made to it (what must never be reached)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import io
import socket
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def build_wheel(directory: Path, name: str, version: str, files: dict[str, str], *,
                requires: tuple[str, ...] = (), tag: str = "py3-none-any",
                extra_entries: dict[str, bytes] | None = None) -> Path:
    """A wheel as a build backend would make it (METADATA, WHEEL, RECORD), with no build backend."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    pure = "true" if tag.endswith("-none-any") else "false"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {pure}\nTag: {tag}\n"
    entries: dict[str, bytes] = {path: text.encode() for path, text in files.items()}
    entries[f"{info}/METADATA"] = metadata.encode()
    entries[f"{info}/WHEEL"] = wheel_meta.encode()
    entries.update(extra_entries or {})
    record = []
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = directory / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries.items():
            zf.writestr(path, data)
    return out


def build_sdist(directory: Path, name: str, version: str) -> Path:
    """A source distribution (PKG-INFO and a setup.py that must never run on the host)."""
    base = f"{name}-{version}"
    entries = {f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
               f"{base}/setup.py": b"raise SystemExit('a build ran')\n"}
    out = directory / f"{base}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for path, data in entries.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


@dataclass
class LocalIndex:
    """What the running index serves and has been asked."""

    url: str
    wheels: dict[str, list[Path]]
    requests: list[str] = field(default_factory=list)
    open: threading.Event = field(default_factory=threading.Event)
    """Cleared: requests are held (counted, unanswered) until it is set again."""

    @property
    def simple(self) -> str:
        return self.url + "/simple/"

    def reset(self) -> None:
        self.requests.clear()


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@contextmanager
def serve_index(wheel_dir: Path, host: str = "127.0.0.1", *, extra_links: dict[str, list[str]] | None = None,
                redirects: dict[str, str] | None = None) -> Iterator[LocalIndex]:
    wheels: dict[str, list[Path]] = {}
    for wheel in sorted(wheel_dir.glob("*.whl")) + sorted(wheel_dir.glob("*.tar.gz")):
        wheels.setdefault(_normalise(wheel.name.split("-")[0]), []).append(wheel)
    index: LocalIndex

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 - the stdlib's name
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:  # noqa: N802 - the stdlib's name
            index.requests.append(self.path)
            index.open.wait(60)
            self._head = head
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            if parts[:1] == ["simple"] and len(parts) == 2:
                found = wheels.get(_normalise(parts[1]))
                extra = (extra_links or {}).get(_normalise(parts[1]), [])
                if not found and not extra:
                    return self._send(404, b"not found", "text/plain")
                links = "".join(
                    f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>\n'
                    for w in found or ())
                links += "".join(f'<a href="{href}">{href.rsplit("/", 1)[-1].split("#")[0]}</a>\n' for href in extra)
                return self._send(200, f"<html><body>{links}</body></html>".encode(), "text/html")
            if parts[:1] == ["files"] and len(parts) == 2:
                if parts[1] in (redirects or {}):
                    self.send_response(302)
                    self.send_header("Location", (redirects or {})[parts[1]])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                path = wheel_dir / parts[1]
                if path.is_file() and path.parent == wheel_dir:
                    return self._send(200, path.read_bytes(), "application/octet-stream")
            self._send(404, b"not found", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not self._head:
                self.wfile.write(body)

    server = _QuietServer((host, 0), Handler)
    index = LocalIndex(f"http://{host}:{server.server_address[1]}", wheels)
    index.open.set()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        index.open.set()
        server.shutdown()
        server.server_close()


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up on a held request (a test's time limit) is expected: nothing to print."""


class Recorder:
    """A loopback TCP listener that records each connection made to it (and answers nothing)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.connections: list[tuple[str, int]] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.connections.append(peer[:2])
            conn.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept() waiting in the thread
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)


@contextmanager
def recorder() -> Iterator[Recorder]:
    listening = Recorder()
    try:
        yield listening
    finally:
        listening.close()


def demo_wheels(directory: Path) -> Path:
    """`tinyapp` 1.0 (needs `tinydep`), `tinydep` 2.0 and 2.1, and `fastext` (a native-tagged wheel)."""
    directory.mkdir(parents=True, exist_ok=True)
    build_wheel(directory, "tinydep", "2.0", {"tinydep/__init__.py": "VERSION = '2.0'\n"})
    build_wheel(directory, "tinydep", "2.1", {"tinydep/__init__.py": "VERSION = '2.1'\n"})
    hello = "import tinydep\n\ndef hello():\n    return 'hello from tinyapp, tinydep ' + tinydep.VERSION\n"
    build_wheel(directory, "tinyapp", "1.0", {"tinyapp/__init__.py": hello}, requires=("tinydep>=2.0",))
    build_wheel(directory, "fastext", "0.1", {"fastext/__init__.py": "from ._speed import *\n",
                                             "fastext/_speed.cpython-314-x86_64-linux-gnu.so": "\x7fELF"},
                tag="cp314-cp314-manylinux_2_17_x86_64")
    return directory


def wheel_io(files: dict[str, bytes]) -> bytes:
    """A raw zip (for hostile wheels: any entry names)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return buffer.getvalue()
