"""WASI guests reach the network only through the host's client, as their policy allows.

Loopback servers stand in for the outside; the resolver maps invented names to 127.0.0.1 and
the policies name 127.0.0.1 explicitly (loopback is otherwise refused)."""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from loopback_origin import SLOW_STEP_S, SMALL_BODY, Origin, TestCA

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
ALLOW = EgressPolicy(mode="allowlist", allow=("*.allowed.test:*", "127.0.0.1:*"))
"""The origins listen on ports of their own: any port, named on purpose."""
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
    with Runner(tmp_path_factory.mktemp("wasi-egress"), isolation="in-process", providers=[provider]) as runner:
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


def test_https_is_verified_by_the_host_with_the_operators_ca(world):
    runner, _, tls = world
    result = run(runner, "import urllib.request\n"
                         f"print(urllib.request.urlopen('https://api.allowed.test:{tls.port}/small').read().decode(), end='')")
    assert result.ok, result.error
    assert result.stdout == SMALL_BODY.decode()
    [event] = result.network
    assert (event.scheme, event.status, event.method) == ("https", 200, "GET")


def test_https_to_a_name_the_certificate_does_not_cover_fails_verification(world):
    runner, _, tls = world
    policy = EgressPolicy(mode="allowlist", allow=(f"127.0.0.1:{tls.port}",))
    result = run(runner, "import urllib.request\n"
                         f"urllib.request.urlopen('https://127.0.0.1:{tls.port}/small')", policy=policy)
    assert result.error is not None and result.error.type == "URLError"
    assert "TLS verification failed" in result.error.message
    [event] = result.network
    assert event.allowed and event.status is None and "TLS" in (event.reason or "")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_denied_destination_is_refused_naming_it_and_the_policy_with_a_hint(world, scheme):
    runner, plain, tls = world
    port = plain.port if scheme == "http" else tls.port
    seen = len(plain.requests) + len(tls.requests)
    result = run(runner, "import urllib.request\n"
                         f"urllib.request.urlopen('{scheme}://evil.test:{port}/small')")
    assert result.error is not None and result.error.type == "URLError"
    assert f"the host refused {scheme}://evil.test:{port}" in result.error.message
    assert "not in the allowlist" in result.error.message and "*.allowed.test" in result.error.message
    assert result.error.hint is not None and "network.allow" in result.error.hint and "evil.test" in result.error.hint
    [event] = result.network
    assert (event.allowed, event.host, event.port) == (False, "evil.test", port)
    assert len(plain.requests) + len(tls.requests) == seen  # nothing reached the origin


def test_the_refusal_is_a_catchable_permission_error_in_the_guest(world):
    runner, plain, _ = world
    result = run(runner, "import http.client, sandbox\n"
                         f"c = http.client.HTTPConnection('evil.test', {plain.port})\n"
                         "try:\n"
                         "    c.request('GET', '/small'); c.getresponse()\n"
                         "except sandbox.NetworkDenied as exc:\n"
                         "    print(isinstance(exc, PermissionError), 'evil.test' in str(exc), 'hint:' in str(exc))")
    assert result.ok, result.error
    assert result.stdout == "True True True\n"


def test_a_redirect_from_an_allowed_to_a_denied_host_is_refused(world):
    runner, plain, _ = world
    target = f"http://evil.test:{plain.port}/small"
    result = run(runner, "import urllib.request\n"
                         f"urllib.request.urlopen('http://api.allowed.test:{plain.port}/redirect?to={target}')")
    assert result.error is not None and "the host refused http://evil.test" in result.error.message
    first, second = result.network
    assert (first.allowed, first.host, first.status) == (True, "api.allowed.test", 302)
    assert (second.allowed, second.host) == (False, "evil.test")
    assert not any(path == "/small" and headers.get("Host", "").startswith("evil") for _, path, headers in plain.requests)


def test_a_name_resolving_to_a_private_address_is_refused_without_an_entry_naming_it(world):
    runner, _, _ = world
    result = run(runner, "import urllib.request\n"
                         "urllib.request.urlopen('http://private.allowed.test/x')")
    assert result.error is not None
    [event] = result.network
    assert not event.allowed and event.address == "10.1.2.3"
    assert "private, loopback or link-local" in (event.reason or "")
    assert result.error.hint is not None and "10.1.2.3" in result.error.hint


def test_loopback_itself_needs_an_entry_naming_it(world):
    runner, plain, _ = world
    result = run(runner, "import urllib.request\n"
                         f"urllib.request.urlopen('http://api.allowed.test:{plain.port}/small')",
                 policy=EgressPolicy(mode="allowlist", allow=("*.allowed.test:*",)))
    [event] = result.network
    assert not event.allowed and event.address == "127.0.0.1"


def test_a_response_over_the_cap_stops_at_the_cap_with_a_clear_limit(world):
    runner, plain, _ = world
    result = run(runner, "import urllib.request\n"
                         f"urllib.request.urlopen('http://api.allowed.test:{plain.port}/big').read()")
    assert result.error is not None and result.error.type == "NetworkLimitExceeded"
    assert "network cap" in result.error.message and str(CAP) in result.error.message
    assert result.error.hint is not None and "max_bytes" in result.error.hint
    [event] = result.network
    assert event.status == 200 and CAP - 1000 <= event.bytes_received <= CAP


def test_a_brokered_secret_reaches_the_origin_and_the_guest_never_sees_it(world, monkeypatch):
    runner, plain, _ = world
    monkeypatch.setenv("WASI_TEST_TOKEN", SECRET)
    credential = Credential(destinations=(f"http://api.allowed.test:{plain.port}",), env="WASI_TEST_TOKEN")  # cleartext
    result = run(runner, "import json, os, urllib.request\n"
                         f"r = urllib.request.urlopen('http://api.allowed.test:{plain.port}/echo-auth')\n"
                         "print(json.dumps({'body': r.read().decode(), 'echo': r.headers['X-Echo'],\n"
                         "                  'env': dict(os.environ)}))",
                 credentials=(credential,))
    assert result.ok, result.error
    assert plain.requests[-1][2]["Authorization"] == f"Bearer {SECRET}"
    seen = json.loads(result.stdout)
    assert SECRET not in result.stdout and SECRET not in result.stderr
    masked = "*" * len(f"Bearer {SECRET}")  # the header's value as the host added it, masked to its length
    assert seen["body"] == f"you sent: {masked}\n" and seen["echo"] == masked
    assert "WASI_TEST_TOKEN" not in seen["env"]
    [event] = result.network
    assert event.credential


def test_a_secret_whose_destination_names_no_scheme_is_not_sent_over_plain_http(world, monkeypatch):
    runner, plain, _ = world
    monkeypatch.setenv("WASI_TEST_TOKEN", SECRET)
    credential = Credential(destinations=("api.allowed.test:*",), env="WASI_TEST_TOKEN")  # any port, no scheme
    result = run(runner, "import urllib.request\n"
                         f"print(urllib.request.urlopen('http://api.allowed.test:{plain.port}/echo-auth').read().decode())",
                 credentials=(credential,))
    assert result.ok, result.error
    assert "Authorization" not in plain.requests[-1][2] and result.stdout == "you sent: \n\n"
    assert not result.network[0].credential


def test_the_secret_is_not_added_for_another_destination_or_a_redirect_there(world, monkeypatch):
    runner, plain, _ = world
    monkeypatch.setenv("WASI_TEST_TOKEN", SECRET)
    credential = Credential(destinations=(f"http://api.allowed.test:{plain.port}",), env="WASI_TEST_TOKEN")
    policy = ALLOW
    result = run(runner, "import urllib.request\n"
                         f"print(urllib.request.urlopen('http://127.0.0.1:{plain.port}/echo-auth').read().decode())",
                 policy=policy, credentials=(credential,))
    assert result.ok, result.error
    assert result.stdout == "you sent: \n\n"
    assert not result.network[0].credential


def test_raw_sockets_stay_unavailable_with_a_hint_naming_the_host_client(world):
    runner, _, _ = world
    result = run(runner, "import socket\nsocket.socket()")
    assert result.error is not None and result.error.type == "PermissionError"
    assert result.error.hint == SOCKET_HINT
    assert result.network == []


def test_under_deny_a_request_is_refused_and_recorded(world):
    runner, plain, _ = world
    result = run(runner, "import urllib.request\n"
                         f"urllib.request.urlopen('http://api.allowed.test:{plain.port}/small')", policy=EgressPolicy())
    assert result.error is not None and "network policy is deny" in result.error.message
    [event] = result.network
    assert not event.allowed


def test_a_session_kernel_uses_the_host_client_on_every_call(world):
    runner, plain, _ = world
    session = runner.session()
    code = ("import urllib.request\n"
            f"print(urllib.request.urlopen('http://api.allowed.test:{plain.port}/small').status)")
    first = session.run_sync(ExecRequest(code=code, egress=ALLOW, limits=LIMITS))
    second = session.run_sync(ExecRequest(code=code, egress=ALLOW, limits=LIMITS))
    assert first.stdout == second.stdout == "200\n"
    assert len(first.network) == len(second.network) == 1


# -- JavaScript: fetch ---------------------------------------------------------------------


def test_js_fetch_reaches_an_allowed_name_with_whatwg_shapes(world):
    runner, plain, _ = world
    result = run(runner, f"""
const r = await fetch('http://api.allowed.test:{plain.port}/small');
const p = fetch('http://api.allowed.test:{plain.port}/small');
console.log(p instanceof Promise, r instanceof Response, r.status, r.ok, r.statusText, r.headers.get('content-length'),
            r.headers instanceof Headers, r.url, r.redirected);
console.log(JSON.stringify(await r.text()));
const b = await (await p).arrayBuffer();
console.log(b instanceof ArrayBuffer, b.byteLength);
""", language="javascript")
    assert result.ok, (result.error, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0] == (f"true true 200 true OK {len(SMALL_BODY)} true http://api.allowed.test:{plain.port}/small false")
    assert lines[1] == json.dumps(SMALL_BODY.decode())
    assert lines[2] == f"true {len(SMALL_BODY)}"
    assert [(e.allowed, e.host, e.method, e.status) for e in result.network] == \
        [(True, "api.allowed.test", "GET", 200)] * 2


def test_js_fetch_posts_json_and_reads_json(world):
    runner, plain, _ = world
    result = run(runner, f"""
const r = await fetch('http://api.allowed.test:{plain.port}/echo', {{
  method: 'POST', headers: {{'Content-Type': 'application/json'}}, body: JSON.stringify({{a: [1, 2], s: 'é'}}),
}});
const data = await r.json();
console.log(r.headers.get('x-content-type'), data.a.length, data.s);
""", language="javascript")
    assert result.ok, (result.error, result.stderr)
    assert result.stdout == "application/json 2 é\n"
    [event] = result.network
    assert event.method == "POST" and event.bytes_sent == len('{"a":[1,2],"s":"é"}'.encode())


def test_js_fetch_follows_redirects_on_the_host_and_refuses_a_denied_hop(world):
    runner, plain, _ = world
    allowed = f"http://api.allowed.test:{plain.port}/small"
    denied = f"http://evil.test:{plain.port}/small"
    result = run(runner, f"""
const r = await fetch('http://api.allowed.test:{plain.port}/redirect?to={allowed}');
console.log(r.status, r.redirected, r.url);
const m = await fetch('http://api.allowed.test:{plain.port}/redirect?to={allowed}', {{redirect: 'manual'}});
console.log(m.status, m.headers.get('location'));
await fetch('http://api.allowed.test:{plain.port}/redirect?to={denied}');
""", language="javascript")
    lines = result.stdout.splitlines()
    assert lines[0] == f"200 true {allowed}"
    assert lines[1] == f"302 {allowed}"
    assert result.error is not None and result.error.type == "NetworkDenied"
    assert f"the host refused http://evil.test:{plain.port}" in result.error.message
    assert result.error.hint is not None and "evil.test" in result.error.hint
    assert [(e.allowed, e.host, e.status) for e in result.network] == [
        (True, "api.allowed.test", 302), (True, "api.allowed.test", 200), (True, "api.allowed.test", 302),
        (True, "api.allowed.test", 302), (False, "evil.test", None)]


def test_js_fetch_of_a_denied_destination_rejects_with_the_policy_and_a_hint(world):
    runner, plain, _ = world
    result = run(runner, f"""
try {{
  await fetch('http://evil.test:{plain.port}/small');
}} catch (e) {{
  console.log(e.name, e instanceof TypeError, e.message.includes('not in the allowlist'), e.message.includes('hint:'));
}}
await fetch('http://evil.test:{plain.port}/small');
""", language="javascript")
    assert result.stdout == "NetworkDenied true true true\n"
    assert result.error is not None and result.error.type == "NetworkDenied"
    assert result.error.hint is not None and "network.allow" in result.error.hint
    assert [e.allowed for e in result.network] == [False, False]


def test_js_fetch_over_the_cap_stops_with_a_clear_limit(world):
    runner, plain, _ = world
    result = run(runner, f"await (await fetch('http://api.allowed.test:{plain.port}/big')).arrayBuffer();",
                 language="javascript")
    assert result.error is not None and result.error.type == "NetworkLimitExceeded"
    assert "network cap" in result.error.message
    assert result.error.hint is not None and "max_bytes" in result.error.hint


def test_js_fetch_https_and_a_brokered_secret(world, monkeypatch):
    runner, _, tls = world
    monkeypatch.setenv("WASI_TEST_TOKEN", SECRET)
    credential = Credential(destinations=(f"api.allowed.test:{tls.port}",), env="WASI_TEST_TOKEN")
    result = run(runner, f"""
const r = await fetch('https://api.allowed.test:{tls.port}/echo-auth');
console.log(await r.text());
console.log(JSON.stringify(std.getenviron()));
""", language="javascript", credentials=(credential,))
    assert result.ok, (result.error, result.stderr)
    assert tls.requests[-1][2]["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in result.stdout and "WASI_TEST_TOKEN" not in result.stdout
    assert result.stdout.startswith("you sent: ***")
    assert result.network[0].credential and result.network[0].scheme == "https"


def test_a_session_policy_change_takes_effect_on_the_next_call_and_only_narrows_its_limit(world):
    from wasm_runner.egress.policy import PolicyError

    runner, plain, _ = world
    session = runner.session(egress=ALLOW)
    session.egress_limit = ALLOW
    code = ("import urllib.request\n"
            f"print(urllib.request.urlopen('http://api.allowed.test:{plain.port}/small').status)")
    assert session.run_sync(code, limits=LIMITS).stdout == "200\n"
    session.set_egress(EgressPolicy(mode="allowlist", allow=("127.0.0.1:*",)))  # narrower: the name is gone
    result = session.run_sync(code, limits=LIMITS)
    assert result.error is not None and "not in the allowlist" in result.error.message
    with pytest.raises(PolicyError, match="evil.test"):
        session.set_egress(EgressPolicy(mode="allowlist", allow=("evil.test",)))
    session.set_egress(ALLOW)
    assert session.run_sync(code, limits=LIMITS).stdout == "200\n"


def test_a_calls_explicit_deny_is_kept_and_a_call_naming_nothing_gets_the_sessions_policy(world):
    from wasm_runner.egress.policy import PolicyError

    runner, plain, _ = world
    session = runner.session(egress=ALLOW)
    code = ("import urllib.request\n"
            f"print(urllib.request.urlopen('http://api.allowed.test:{plain.port}/small').status)")
    denied = session.run_sync(code, egress=EgressPolicy(mode="deny"), limits=LIMITS)
    assert denied.error is not None and [e.allowed for e in denied.network] == [False]
    assert "deny" in (denied.network[0].reason or "")
    assert session.run_sync(code, limits=LIMITS).stdout == "200\n"  # egress unset: the session's
    with pytest.raises(PolicyError, match="the session's"):
        session.run_sync(code, egress=EgressPolicy(mode="open"), limits=LIMITS)


def test_the_deadline_cuts_a_response_that_drips_in(world):
    runner, plain, _ = world
    started = time.monotonic()
    code = f"import urllib.request\nurllib.request.urlopen('http://api.allowed.test:{plain.port}/slow?seconds=20').read()"
    result = runner.run_sync(ExecRequest(code=code, egress=ALLOW, limits=Limits(timeout_s=1.5)))
    elapsed = time.monotonic() - started
    assert elapsed < 3.0, elapsed  # cut by the host at the deadline, not by the watchdog after its grace
    assert result.error is not None
    [event] = result.network
    assert event.allowed and event.status == 200 and "deadline" in (event.reason or "")
    assert 0 < event.bytes_received < 20 / SLOW_STEP_S + 200  # some of the drip, headers included


def test_a_request_body_over_the_cap_is_refused_before_anything_is_sent(world):
    runner, plain, _ = world
    before = len(plain.requests)
    result = run(runner, "import urllib.request\n"
                         f"req = urllib.request.Request('http://api.allowed.test:{plain.port}/echo', "
                         f"data=b'x' * {CAP + 1}, method='POST')\n"
                         "urllib.request.urlopen(req)")
    assert result.error is not None and "network cap" in result.error.message
    assert result.error.hint is not None and "max_bytes" in result.error.hint
    [event] = result.network
    assert event.method == "POST" and event.bytes_sent == 0 and "network cap" in (event.reason or "")
    assert len(plain.requests) == before  # the origin saw nothing


def test_js_fetch_takes_a_request_object_with_its_method_headers_and_body(world):
    runner, plain, _ = world
    result = run(runner, f"""
const request = new Request('http://api.allowed.test:{plain.port}/echo', {{
  method: 'POST', headers: {{'Content-Type': 'application/x-test'}}, body: 'sent in a Request'}});
const r = await fetch(request);
console.log(r.status, r.headers.get('X-Content-Type'), await r.text());
""", language="javascript")
    assert result.ok, (result.error, result.stderr)
    assert result.stdout == "200 application/x-test sent in a Request\n"
    method, path, headers = plain.requests[-1]
    sent = {name.lower(): value for name, value in headers.items()}
    assert (method, path, sent["content-type"]) == ("POST", "/echo", "application/x-test")
    [event] = result.network
    assert event.method == "POST" and event.bytes_sent == len("sent in a Request")
