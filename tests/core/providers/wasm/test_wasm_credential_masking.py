"""A WASI run's brokered credential never comes back: not from a destination that reflects it
(as sent, encoded, compressed, in the reason phrase or a header), not through a redirect to
another origin, and not in what the run prints or streams. Its fetches name no host library."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from reflecting_origin import FORMS, ReflectingOrigin

from wasm_runner import Limits, Runner
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.providers.wasm.provider import WasmProvider
from wasm_runner_protocol.egress import Credential, EgressPolicy
from wasm_runner_protocol.execution import ExecRequest

SECRET = "wasi-R3flected-t0ken-5c2a9e"
HEADER = f"Bearer {SECRET}"
NAMES = {"api.allowed.test": ["127.0.0.1"], "other.allowed.test": ["127.0.0.1"]}
ALLOW = EgressPolicy(mode="allowlist", allow=("*.allowed.test:*", "127.0.0.1:*"))
LIMITS = Limits(timeout_s=30)


def leaked_forms(value: str) -> list[str]:
    """The ways a reflecting destination hands the value back, as text the guest could print."""
    data = value.encode()
    return [value, base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode(),
            base64.b64encode(data).decode().rstrip("="), quote(value, safe=""), data.hex(), data.hex().upper()]


def leaks(text: str) -> list[str]:
    return [form for value in (HEADER, SECRET) for form in leaked_forms(value) if form.lower() in text.lower()]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    origin = ReflectingOrigin()
    settings = EgressSettings(resolver=Resolver(NAMES))
    provider = WasmProvider(prewarm_languages=(), egress=settings)
    with Runner(tmp_path_factory.mktemp("wasi-masking"), providers=[provider], isolation="in-process") as runner:
        yield runner, origin
    origin.close()


@pytest.fixture
def credential(world, monkeypatch):
    _, origin = world
    monkeypatch.setenv("WASI_MASKING_TOKEN", SECRET)
    return Credential(destinations=(f"http://api.allowed.test:{origin.port}",), env="WASI_MASKING_TOKEN")


def run(runner: Runner, code: str, credential: Credential, language: str = "python", **fields):
    return runner.run_sync(ExecRequest(language=language, code=code, egress=ALLOW, limits=LIMITS,
                                       credentials=(credential,), **fields))


def test_a_destination_reflecting_the_credential_in_any_form_gives_the_guest_none_of_them(world, credential):
    runner, origin = world
    result = run(runner, "import json, urllib.request\n"
                         "seen = {}\n"
                         f"for form in {list(FORMS)!r}:\n"
                         f"    r = urllib.request.urlopen('http://api.allowed.test:{origin.port}/reflect?as=' + form)\n"
                         "    seen[form] = {'reason': r.reason, 'headers': dict(r.headers), 'body': r.read().decode('latin-1')}\n"
                         "print(json.dumps(seen))", credential)
    assert result.ok, result.error
    assert all(headers["authorization"] == HEADER for _, headers in origin.requests[-len(FORMS):])
    seen = json.loads(result.stdout)
    for form, answer in seen.items():
        assert leaks(json.dumps(answer)) == [], form
        assert "*" * 8 in json.dumps(answer), form  # it was reflected, and masked
    assert "Content-Encoding" not in seen["gzip"]["headers"]  # decoded by the host to be masked
    assert seen["gzip"]["body"] == "*" * len(HEADER)
    assert origin.requests[-1][1]["accept-encoding"] == "identity"


def test_js_fetch_sees_no_reflected_credential_and_no_host_library_name(world, credential):
    runner, origin = world
    result = run(runner, "const out = {};\n"
                         "for (const form of ['base64', 'gzip', 'reason', 'header', 'hex']) {\n"
                         f"  const r = await fetch('http://api.allowed.test:{origin.port}/reflect?as=' + form);\n"
                         "  out[form] = {status: r.statusText, echo: r.headers.get('x-echo'), body: await r.text()};\n"
                         "}\n"
                         "console.log(JSON.stringify(out));", credential, language="javascript")
    assert result.ok, result.error
    assert leaks(result.stdout) == [] and "*" * 8 in result.stdout
    assert origin.requests[-1][1]["user-agent"] == "wasm-runner"


def test_a_guest_user_agent_is_kept(world, credential):
    runner, origin = world
    result = run(runner, f"await fetch('http://other.allowed.test:{origin.port}/reflect', "
                         "{headers: {'User-Agent': 'my-agent/1'}});", credential, language="javascript")
    assert result.ok, result.error
    assert origin.requests[-1][1]["user-agent"] == "my-agent/1"


def test_a_redirect_to_another_origin_does_not_carry_the_credential(world, credential):
    runner, origin = world
    target = f"http://other.allowed.test:{origin.port}/reflect?as=exact"
    result = run(runner, "import urllib.request\n"
                         f"r = urllib.request.urlopen('http://api.allowed.test:{origin.port}/redirect?to={quote(target)}')\n"
                         "print(r.read().decode())", credential)
    assert result.ok, result.error
    first, second = origin.requests[-2:]
    assert first[1]["authorization"] == HEADER and "authorization" not in second[1]
    assert result.stdout == "\n"


def test_what_a_run_holding_the_credential_prints_streams_and_raises_is_redacted(world, credential):
    runner, _ = world
    chunks: list[bytes] = []
    code = (f"secret = {SECRET[:10]!r} + {SECRET[10:]!r}\n"  # the guest came by it some way
            "import base64, sys\n"
            "print('token:', secret)\n"
            "print('b64:', base64.b64encode(secret.encode()).decode(), file=sys.stderr)\n"
            "raise RuntimeError('failed with ' + secret)")
    result = runner.run_sync(
        ExecRequest(language="python", code=code, egress=ALLOW, limits=LIMITS, credentials=(credential,)),
        listener=lambda stream, data: chunks.append(data))
    assert not result.ok
    assert "token: [redacted]" in result.stdout and "b64: [redacted]" in result.stderr
    assert SECRET not in result.error.message + result.error.traceback and "[redacted]" in result.error.message
    streamed = b"".join(chunks).decode()
    assert leaks(streamed) == [] and "token: [redacted]" in streamed
    assert leaks(result.stdout + result.stderr) == []
