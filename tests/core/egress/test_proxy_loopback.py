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
