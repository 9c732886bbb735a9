"""A native run's brokered credential never comes back from a destination that reflects it, a
redirect to another origin does not carry it, and the usual tools (curl, Python, Node.js) reach
an allowlisted loopback server through the host's proxy. The proxy's directories live under the
Runner's own and go with it."""

from __future__ import annotations

import base64
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
from reflecting_origin import FORMS, ReflectingOrigin

from wasm_runner import Limits, Runner
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_protocol.egress import Credential, EgressPolicy
from wasm_runner_protocol.execution import ExecRequest

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

SECRET = "native-R3flected-t0ken-81d4b0"
HEADER = f"Bearer {SECRET}"
NAMES = {"api.allowed.test": ["127.0.0.1"], "other.allowed.test": ["127.0.0.1"]}
ALLOW = EgressPolicy(mode="allowlist", allow=("*.allowed.test:*", "127.0.0.1:*"))
LIMITS = Limits(timeout_s=60)


def leaks(text: str) -> list[str]:
    found = []
    for value in (HEADER, SECRET):
        data = value.encode()
        for form in (value, base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode(),
                     base64.b64encode(data).decode().rstrip("="), quote(value, safe=""), data.hex(), data.hex().upper()):
            if form.lower() in text.lower():
                found.append(form)
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    origin = ReflectingOrigin()
    provider = NativeProvider(egress=EgressSettings(resolver=Resolver(NAMES)))
    with Runner(tmp_path_factory.mktemp("native-masking"), providers=[provider], isolation="in-process") as runner:
        yield runner, origin, provider
    origin.close()


@pytest.fixture
def credential(world, monkeypatch):
    _, origin, _ = world
    monkeypatch.setenv("NATIVE_MASKING_TOKEN", SECRET)
    return Credential(destinations=(f"http://api.allowed.test:{origin.port}",), env="NATIVE_MASKING_TOKEN")


def run(runner: Runner, code: str, language: str = "bash", policy: EgressPolicy = ALLOW, **fields):
    return runner.run_sync(ExecRequest(language=language, code=code, egress=policy, limits=LIMITS, **fields))


def test_a_destination_reflecting_the_credential_in_any_form_gives_the_guest_none_of_them(world, credential):
    runner, origin, _ = world
    script = "".join(f"echo '== {form}'; curl -sS -i 'http://api.allowed.test:{origin.port}/reflect?as={form}'; echo\n"
                     for form in FORMS)
    result = run(runner, script, credentials=(credential,))
    assert result.ok, result.stderr
    sent = origin.requests[-len(FORMS):]
    assert all(headers["authorization"] == HEADER for _, headers in sent)
    assert all(headers["accept-encoding"] == "identity" for _, headers in sent)
    assert leaks(result.stdout) == []
    sections = dict(part.split("\n", 1) for part in result.stdout.split("== ")[1:])
    assert set(sections) == set(FORMS)
    for form, answer in sections.items():
        assert "*" * 8 in answer, form  # it was reflected, and masked
    assert "content-encoding" not in sections["gzip"].lower() and "*" * len(HEADER) in sections["gzip"]


def test_a_redirect_to_another_origin_does_not_carry_the_credential(world, credential):
    runner, origin, _ = world
    target = quote(f"http://other.allowed.test:{origin.port}/reflect?as=exact", safe="")
    result = run(runner, f"curl -sS -L 'http://api.allowed.test:{origin.port}/redirect?to={target}'",
                 credentials=(credential,))
    assert result.ok, result.stderr
    first, second = origin.requests[-2:]
    assert first[1]["authorization"] == HEADER and "authorization" not in second[1]
    assert leaks(result.stdout) == []


def test_curl_python_and_node_reach_an_allowlisted_loopback_server_through_the_proxy(world):
    runner, origin, _ = world
    url = f"http://127.0.0.1:{origin.port}/reflect?as=exact"
    policy = EgressPolicy(mode="allowlist", allow=(f"127.0.0.1:{origin.port}",))
    before = len(origin.requests)
    tools = run(runner, f"curl -sS -o /dev/null -w '%{{http_code}}\\n' '{url}' && "
                        f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}').status)\"",
                policy=policy)
    assert tools.ok, tools.stderr
    assert tools.stdout.split() == ["200", "200"]
    node = run(runner, f"const r = await fetch('{url}'); console.log(r.status);", language="javascript", policy=policy,
               provider="native")
    assert node.ok, node.stderr
    assert node.stdout.strip() == "200"
    assert len(origin.requests) == before + 3
    events = tools.network + node.network
    assert [(e.allowed, e.host, e.port) for e in events] == [(True, "127.0.0.1", origin.port)] * 3


def test_proxy_dirs_live_under_the_runners_and_go_with_it():
    origin = ReflectingOrigin()
    data_dir = Path(tempfile.mkdtemp(prefix="wr-"))  # short: a socket's path must stay within 107 bytes
    try:
        provider = NativeProvider(egress=EgressSettings())
        runner = Runner(data_dir, providers=[provider], isolation="in-process")
        policy = EgressPolicy(mode="allowlist", allow=(f"127.0.0.1:{origin.port}",))
        result = run(runner, f"curl -sS -o /dev/null 'http://127.0.0.1:{origin.port}/reflect'", policy=policy)
        assert result.ok, result.stderr
        bundle = provider.egress.bundle()  # made by the run, kept for the next
        socket_dir = provider.egress.temporary("net", socket=True)
        assert bundle.is_relative_to(runner.data_dir) and socket_dir.is_relative_to(runner.data_dir)
        runner.close()
        assert not bundle.exists() and not socket_dir.exists() and not runner.scratch_dir.exists()
    finally:
        origin.close()
        shutil.rmtree(data_dir, ignore_errors=True)
