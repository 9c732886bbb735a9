"""The egress proxy's files (the CA bundle sandboxes trust, each run's socket directory) live under
the service's data directory while it runs, and nothing of them is left when it stops."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from reflecting_origin import ReflectingOrigin

from tests.helpers.server_helpers import call, make_config
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_server.app import create_app

pytestmark = pytest.mark.asyncio

_bwrap = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed" if _bwrap is None else probe(_bwrap)


@pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")
async def test_the_proxys_directories_are_under_the_data_dir_and_gone_after_the_service_stops():
    origin = ReflectingOrigin()
    data_dir = Path(tempfile.mkdtemp(prefix="wr-"))  # short: a socket's path must stay within 107 bytes
    profile = {"language": "bash", "provider": "native",
               "network": {"mode": "allowlist", "allow": [f"127.0.0.1:{origin.port}"]}}
    client = TestClient(TestServer(create_app(make_config(data_dir, profiles={"net": profile})), host="127.0.0.1",
                                   port=0))
    try:
        await client.start_server()
        script = f"curl -sS -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{origin.port}/reflect && ls /run/egress"
        status, result = await call(client, "POST", "/v1/exec", json={"code": script, "profile": "net"})
        assert status == 200 and result["exit_code"] == 0, result
        assert result["stdout"].startswith("200")
        bundles = list(data_dir.glob("**/ca-*/ca-certificates.crt"))
        # kept for the next run, in the service's data directory: one per worker process that opened the
        # proxy (kernels made ahead open it too, refusing everything until a call renews it)
        assert bundles
        await client.close()
        assert not any(bundle.exists() for bundle in bundles)
        assert not list(data_dir.glob("**/net-*")) and not list(data_dir.glob("**/ca-*"))
    finally:
        await client.close()
        origin.close()
        shutil.rmtree(data_dir, ignore_errors=True)
