"""WASI guests reach the network only through the host's client, as their policy allows.

Loopback servers stand in for the outside; the resolver maps invented names to 127.0.0.1 and
the policies name 127.0.0.1 explicitly (loopback is otherwise refused)."""

from __future__ import annotations

import hashlib
import json

import pytest
from loopback_origin import BIG_BYTES, SMALL_BODY, Origin, TestCA

from wasm_runner import Limits, Runner
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.hints import SOCKET_HINT
from wasm_runner.providers.wasm.provider import WasmProvider
from wasm_runner_protocol.egress import Credential, EgressPolicy
from wasm_runner_protocol.execution import ExecRequest

CAP = 300_000
MEDIUM = 200_192
"""Larger than the first piece the host sends with the head, smaller than the cap."""
SECRET = "s3cr3t-wasi-token-7d1e"
NAMES = {"api.allowed.test": ["127.0.0.1"], "evil.test": ["127.0.0.1"], "private.allowed.test": ["10.1.2.3"]}
ALLOW = EgressPolicy(mode="allowlist", allow=("*.allowed.test", "127.0.0.1"))
LIMITS = Limits(timeout_s=30)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("origin")
    (root / "medium.bin").write_bytes(bytes(range(256)) * (MEDIUM // 256))
    ca = TestCA(tmp_path_factory.mktemp("certs"))
    plain = Origin(root)
    tls = Origin(root, ca.server_context("api.allowed.test", "evil.test"))
    settings = EgressSettings(resolver=Resolver(NAMES), extra_ca_file=ca.pem, max_bytes=CAP)
    provider = WasmProvider(prewarm_languages=(), egress=settings)
    with Runner(tmp_path_factory.mktemp("wasi-egress"), providers=[provider]) as runner:
        yield runner, plain, tls
    plain.close()
    tls.close()


def run(runner: Runner, code: str, policy: EgressPolicy = ALLOW, language: str = "python", **fields):
    return runner.run_sync(ExecRequest(language=language, code=code, egress=policy, limits=LIMITS, **fields))


def test_urllib_get_reaches_an_allowed_name_and_is_one_event(world):
    runner, plain, _ = world
    result = run(runner, "import urllib.request\n"
                         f"r = urllib.request.urlopen('http://api.allowed.test:{plain.port}/small')\n"
                         "print(r.status, r.read().decode(), end='')")
    assert result.ok, result.error
    assert result.stdout == "200 " + SMALL_BODY.decode()
    [event] = result.network
    assert (event.allowed, event.host, event.port, event.scheme, event.method, event.status, event.address) == \
        (True, "api.allowed.test", plain.port, "http", "GET", 200, "127.0.0.1")
    assert event.bytes_received >= len(SMALL_BODY) and event.duration_ms > 0
    assert plain.requests[-1][2]["Host"] == f"api.allowed.test:{plain.port}"


def test_urllib_post_sends_its_body_and_headers(world):
    runner, plain, _ = world
    result = run(runner, "import json, urllib.request\n"
                         f"req = urllib.request.Request('http://api.allowed.test:{plain.port}/echo', "
                         "data=json.dumps({'n': 1}).encode(), headers={'Content-Type': 'application/json'})\n"
                         "r = urllib.request.urlopen(req)\n"
                         "print(r.headers['X-Content-Type'], r.read().decode())")
    assert result.ok, result.error
    assert result.stdout == 'application/json {"n": 1}\n'
    [event] = result.network
    assert event.method == "POST" and event.bytes_sent == len(b'{"n": 1}')


def test_http_client_keeps_its_api_and_streams_a_body_in_pieces(world):
    runner, plain, _ = world
    result = run(runner, "import hashlib, http.client\n"
                         f"c = http.client.HTTPConnection('api.allowed.test', {plain.port})\n"
                         "c.request('GET', '/medium.bin')\n"
                         "r = c.getresponse()\n"
                         "digest, n = hashlib.sha256(), 0\n"
                         "while chunk := r.read(10000):\n"
                         "    digest.update(chunk)\n"
                         "    n += len(chunk)\n"
                         "c.request('HEAD', '/small')\n"
                         "h = c.getresponse()\n"
                         "print(r.status, r.getheader('Content-Length'), n, digest.hexdigest(), h.status, h.read())")
    assert result.ok, result.error
    expected = hashlib.sha256(bytes(range(256)) * (MEDIUM // 256)).hexdigest()
    assert result.stdout == f"200 {MEDIUM} {MEDIUM} {expected} 200 b''\n"
    assert [(e.method, e.status) for e in result.network] == [("GET", 200), ("HEAD", 200)]
    assert result.network[0].bytes_received >= MEDIUM
