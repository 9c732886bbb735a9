"""Native runs reach the network only through the host's egress proxy, as their policy allows.

Loopback servers stand in for the outside; the resolver maps invented names to 127.0.0.1 and
the policies name 127.0.0.1 explicitly (loopback is otherwise refused)."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from loopback_origin import BIG_BYTES, SMALL_BODY, Origin, TestCA

from wasm_runner import Limits, Runner
from wasm_runner.egress.resolver import Resolver
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.hints import NATIVE_DENY_HINT, TURN_ON
from wasm_runner.processes import manager as process_manager
from wasm_runner.providers.native import NativeProvider
from wasm_runner.providers.native import egress as native_egress
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner.providers.native.c_helpers import ensure_relay
from wasm_runner_protocol.egress import Credential, EgressPolicy
from wasm_runner_protocol.execution import ExecRequest

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

CAP = 300_000
MEDIUM = 200_192
"""Smaller than the cap; two of them are more."""
SECRET = "s3cr3t-token-4f9a2c"
NAMES = {"api.allowed.test": ["127.0.0.1"], "pypi.allowed.test": ["127.0.0.1"], "git.allowed.test": ["127.0.0.1"],
         "evil.test": ["127.0.0.1"], "private.allowed.test": ["10.1.2.3"]}
ALLOW = EgressPolicy(mode="allowlist", allow=("*.allowed.test:*", "127.0.0.1:*"))
"""The origins listen on ports of their own: any port, named on purpose."""
LIMITS = Limits(timeout_s=60)


def needs(tool: str):
    return pytest.mark.skipif(shutil.which(tool, path="/usr/bin:/bin") is None,
                              reason=f"{tool} is not installed (apt-get install {tool})")


def make_wheel(directory: Path) -> str:
    """A minimal pure-Python wheel (tinypkg 1.0), served from a PEP 503 index."""
    name = "tinypkg-1.0-py3-none-any.whl"
    files = {"tinypkg/__init__.py": b"VALUE = 42\n",
             "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + "tinypkg-1.0.dist-info/RECORD,,\n"
    (directory / "files").mkdir()
    with zipfile.ZipFile(directory / "files" / name, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr("tinypkg-1.0.dist-info/RECORD", record)
    (directory / "simple" / "tinypkg").mkdir(parents=True)
    (directory / "simple" / "tinypkg" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{name}">{name}</a></body></html>\n')
    return name


def make_repository(directory: Path) -> None:
    """A bare git repository with one commit, prepared for the dumb HTTP protocol."""
    work = directory / "work"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(directory), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    (work / "README").write_text("cloned through the egress proxy\n")
    subprocess.run(["git", "-C", str(work), "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-q", "-m", "first"], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(directory / "repo.git")], check=True, env=env)
    subprocess.run(["git", "-C", str(directory / "repo.git"), "update-server-info"], check=True, env=env)


@pytest.fixture(scope="module", params=["compiled relay", "python relay"])
def world(request, tmp_path_factory):
    """Every test twice: with the relay compiled from C (where a compiler is: here and in CI) and with
    the Python one that stands in where none is."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "python relay":
            patch.setattr(native_egress, "ensure_relay", lambda: None)
        else:
            assert ensure_relay() is not None, "the C relay should build here (cc is installed)"
        yield from _world(tmp_path_factory)


def _world(tmp_path_factory):
    root = tmp_path_factory.mktemp("origin")
    (root / "medium.bin").write_bytes(bytes(range(256)) * (MEDIUM // 256))
    certs = tmp_path_factory.mktemp("certs")
    wheel = make_wheel(root)
    if shutil.which("git"):
        make_repository(root)
    ca = TestCA(certs)
    plain = Origin(root)
    tls = Origin(root, ca.server_context("api.allowed.test", "evil.test"))
    settings = EgressSettings(resolver=Resolver(NAMES), extra_ca_file=ca.pem, max_bytes=CAP)
    with Runner(tmp_path_factory.mktemp("native-egress"), isolation="in-process",
                providers=[NativeProvider(egress=settings)]) as runner:
        yield runner, plain, tls, wheel
    plain.close()
    tls.close()


def run(runner: Runner, script: str, policy: EgressPolicy = ALLOW, **fields):
    return runner.run_sync(ExecRequest(language="bash", code=script, egress=policy, limits=LIMITS, **fields))


def test_curl_reaches_an_allowed_destination_and_each_request_is_an_event(world):
    runner, plain, _, _ = world
    result = run(runner, f"curl -sS -f http://api.allowed.test:{plain.port}/small")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.encode() == SMALL_BODY
    [event] = result.network
    assert (event.allowed, event.host, event.port, event.scheme, event.method, event.status, event.address) == \
        (True, "api.allowed.test", plain.port, "http", "GET", 200, "127.0.0.1")
    assert event.bytes_received > len(SMALL_BODY) and event.bytes_sent > 0


def test_the_run_starts_behind_the_relay_of_its_kind(world, request):
    runner, plain, _, _ = world
    result = run(runner, "test -x /run/egress-relay && echo compiled || echo python")
    assert result.stdout == ("compiled\n" if "compiled" in request.node.callspec.id else "python\n")


def test_https_goes_through_a_connect_tunnel_verified_by_the_guest(world):
    runner, _, tls, _ = world
    result = run(runner, f"curl -sS -f https://api.allowed.test:{tls.port}/small")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.encode() == SMALL_BODY
    [event] = result.network
    assert (event.allowed, event.scheme, event.method, event.status) == (True, "https", None, 200)
    assert event.bytes_received > len(SMALL_BODY)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_denied_destination_is_refused_with_the_policy_and_a_hint(world, scheme):
    runner, plain, tls, _ = world
    port = plain.port if scheme == "http" else tls.port
    result = run(runner, f"curl -sS -f {scheme}://evil.test:{port}/small")
    assert result.exit_code != 0
    assert "returned error: 403" in result.stderr  # curl -f says so for a refused CONNECT too
    [event] = result.network
    assert not event.allowed and event.host == "evil.test" and event.status == 403
    assert "not in the allowlist" in (event.reason or "")
    assert result.error is not None and result.error.type == "NetworkDenied"
    assert f"{scheme}://evil.test:{port}" in result.error.message and "*.allowed.test" in result.error.message
    assert result.error.hint is not None and "network.allow" in result.error.hint and "evil.test" in result.error.hint
    assert not any("evil" in headers.get("Host", "") for _, _, headers in plain.requests + tls.requests)


def test_an_entry_without_a_port_does_not_open_a_tunnel_to_another_port_of_the_host(world):
    runner, _, tls, _ = world
    before = len(tls.requests)
    policy = EgressPolicy(mode="allowlist", allow=("*.allowed.test", "127.0.0.1:*"))  # 443 only by name
    result = run(runner, f"curl -sS -f https://api.allowed.test:{tls.port}/small", policy=policy)
    assert result.exit_code != 0 and "403" in result.stderr
    [event] = result.network
    assert not event.allowed and event.port == tls.port and "not in the allowlist" in (event.reason or "")
    assert len(tls.requests) == before
    allowed = run(runner, f"curl -sS -f https://api.allowed.test:{tls.port}/small",
                  policy=EgressPolicy(mode="allowlist", allow=(f"api.allowed.test:{tls.port}", "127.0.0.1:*")))
    assert allowed.exit_code == 0, allowed.stderr


def test_the_refusal_body_names_the_destination_the_policy_and_the_proxy_status(world):
    runner, plain, _, _ = world
    result = run(runner, f"curl -sS -i http://evil.test:{plain.port}/small")
    assert result.exit_code == 0  # without -f curl prints the answer
    assert "403" in result.stdout.splitlines()[0]
    assert "proxy-status: wasm-runner-egress; error=http_request_denied" in result.stdout.lower()
    assert f"refused http://evil.test:{plain.port}" in result.stdout and "allowlist" in result.stdout


def test_a_redirect_from_an_allowed_to_a_denied_host_is_refused(world):
    runner, plain, _, _ = world
    target = f"http://evil.test:{plain.port}/small"
    result = run(runner, f"curl -sS -f -L 'http://api.allowed.test:{plain.port}/redirect?to={target}'")
    assert result.exit_code != 0 and SMALL_BODY.decode() not in result.stdout
    first, second = result.network
    assert first.allowed and first.status == 302
    assert not second.allowed and second.host == "evil.test"
    assert result.error is not None and result.error.type == "NetworkDenied"


def test_a_name_resolving_to_a_private_address_is_refused(world):
    runner, _, _, _ = world
    result = run(runner, "curl -sS -f http://private.allowed.test/ ; curl -sS -f https://private.allowed.test/")
    assert result.exit_code != 0
    assert [(e.allowed, e.address, e.scheme) for e in result.network] == \
        [(False, "10.1.2.3", "http"), (False, "10.1.2.3", "https")]
    assert all("private" in (e.reason or "") for e in result.network)
    assert result.error is not None and "10.1.2.3" in (result.error.hint or "")


def test_a_response_larger_than_the_cap_stops_at_the_cap(world):
    runner, plain, _, _ = world
    result = run(runner, f"curl -sS -f -o /tmp/big http://api.allowed.test:{plain.port}/big; "
                         "echo size=$(stat -c %s /tmp/big)")
    assert result.exit_code == 0  # the script goes on; curl itself failed
    assert "curl: (18)" in result.stderr
    size = int(result.stdout.split("size=")[1])
    assert 0 < size <= CAP < BIG_BYTES
    [event] = result.network
    assert event.bytes_sent + event.bytes_received == CAP
    assert "network cap" in (event.reason or "")


def test_a_failed_run_over_the_cap_says_which_limit(world):
    runner, plain, _, _ = world
    result = run(runner, f"curl -sS -f -o /dev/null http://api.allowed.test:{plain.port}/big")
    assert result.exit_code != 0
    assert result.error is not None and result.error.type == "LimitExceeded"
    assert "network cap" in result.error.message and "max_bytes" in (result.error.hint or "")


def test_a_brokered_secret_reaches_the_server_and_nowhere_the_guest_can_read(world, monkeypatch):
    runner, plain, _, _ = world
    monkeypatch.setenv("TEST_EGRESS_TOKEN", SECRET)
    before = len(plain.requests)
    credential = Credential(destinations=(f"http://api.allowed.test:{plain.port}",), env="TEST_EGRESS_TOKEN")
    script = (f"curl -sS -f -D - http://api.allowed.test:{plain.port}/echo-auth\n"
              "env\n"
              # everywhere the guest writes or the host puts files for it (the system tree is the image's)
              # the pattern is put together at run time: the script itself must not hold the secret
              f"half={SECRET[:5]}; grep -rl \"$half{SECRET[5:]}\" /workspace /tmp /etc /run /proc/$$/environ"
              " /proc/$$/cmdline 2>/dev/null; echo grep-done\n")
    result = run(runner, script, credentials=(credential,))
    assert result.exit_code == 0, result.stderr
    [(_, path, headers)] = plain.requests[before:]
    assert path == "/echo-auth" and headers["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in result.stdout + result.stderr, result.stdout
    assert f"you sent: {'*' * len('Bearer ' + SECRET)}" in result.stdout  # the added header masked, same length
    assert "grep-done" in result.stdout
    [event] = result.network
    assert event.credential and event.status == 200


def test_a_raw_tcp_connection_without_the_proxy_fails(world):
    runner, plain, _, _ = world
    before = len(plain.requests)
    script = (
        "python3 - <<'EOF'\n"
        "import socket\n"
        f"for address in [('127.0.0.1', {plain.port}), ('1.1.1.1', 80)]:\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=3).close()\n"
        "        print('connected', address)\n"
        "    except OSError as exc:\n"
        "        print('refused', address, type(exc).__name__)\n"
        "EOF\n"
        f"curl -sS --noproxy '*' http://api.allowed.test:{plain.port}/small || echo direct-failed\n")
    result = run(runner, script, policy=EgressPolicy(mode="allowlist", allow=(f"127.0.0.1:{plain.port}", "1.1.1.1")))
    assert "connected" not in result.stdout, result.stdout
    assert result.stdout.count("refused") == 2 and "direct-failed" in result.stdout
    assert plain.requests[before:] == [] and result.network == []


DENY_LINE = "network policy deny: {url} is not allowed; turn it on for the session with PATCH /v1/sessions/{{id}}"


@pytest.mark.parametrize(("tool", "script", "url"), [
    ("curl https", "curl -sS https://api.allowed.test:{tls}/small", "https://api.allowed.test:{tls}"),
    ("curl http", "curl -sS -f http://api.allowed.test:{plain}/small", "http://api.allowed.test:{plain}"),
    ("pip", "python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir --retries 0 "
            "--index-url http://pypi.allowed.test:{plain}/simple/ --trusted-host pypi.allowed.test -d /tmp/dl tinypkg",
     "http://pypi.allowed.test:{plain}"),
    ("git", "git clone -q https://git.allowed.test:{tls}/repo.git cloned", "https://git.allowed.test:{tls}"),
    ("npm", "npm install --no-audit --no-fund --fetch-retries=0 --cache /tmp/.npm "
            "--registry http://api.allowed.test:{plain}/ left-pad",
     "http://api.allowed.test:{plain}"),
])
def test_under_deny_a_tool_meets_a_refusal_that_names_the_policy_and_the_run_lists_it(world, tool, script, url):
    runner, plain, tls, _ = world
    before = len(plain.requests) + len(tls.requests)
    url = url.format(plain=plain.port, tls=tls.port)
    result = run(runner, script.format(plain=plain.port, tls=tls.port), policy=EgressPolicy())
    assert result.exit_code != 0, result.stdout
    assert DENY_LINE.format(url=url) in result.stdout + result.stderr, result.stderr[-800:]
    assert '{"egress": "open"}' in result.stderr
    assert result.network and all(not e.allowed and e.reason == "the network policy is deny" for e in result.network)
    assert result.error is not None and result.error.type == "NetworkDenied" and result.error.hint == NATIVE_DENY_HINT
    assert len(plain.requests) + len(tls.requests) == before  # nothing reached the origins


def test_under_deny_the_refusal_reason_phrase_names_the_policy(world):
    runner, plain, _, _ = world
    result = run(runner, f"curl -sS -i http://api.allowed.test:{plain.port}/small", policy=EgressPolicy())
    status_line = result.stdout.splitlines()[0]
    assert status_line.startswith("HTTP/1.1 403 network policy deny: api.allowed.test is not allowed"), status_line
    assert "proxy-status: wasm-runner-egress" in result.stdout.lower()


def test_pip_downloads_a_wheel_from_an_allowed_index(world):
    runner, plain, _, wheel = world
    index = f"http://pypi.allowed.test:{plain.port}/simple/"
    result = run(runner, f"python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir "
                         f"--index-url {index} --trusted-host pypi.allowed.test -d /workspace/dl tinypkg")
    assert result.exit_code == 0, result.stderr
    assert f"dl/{wheel}" in result.files.created
    assert all(e.allowed and e.host == "pypi.allowed.test" for e in result.network) and len(result.network) >= 2


def test_pip_from_a_denied_index_fails_with_the_hint(world):
    runner, plain, _, _ = world
    result = run(runner, f"python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir --retries 0 "
                         f"--index-url http://evil.test:{plain.port}/simple/ --trusted-host evil.test -d /tmp/dl tinypkg")
    assert result.exit_code != 0
    assert result.error is not None and result.error.type == "NetworkDenied" and "evil.test" in result.error.message
    assert result.error.hint is not None and "evil.test" in result.error.hint


@needs("git")
def test_git_clones_over_http_from_an_allowed_host_and_not_from_a_denied_one(world):
    runner, plain, _, _ = world
    result = run(runner, f"git clone -q http://git.allowed.test:{plain.port}/repo.git cloned && cat cloned/README")
    assert result.exit_code == 0, result.stderr
    assert "cloned through the egress proxy" in result.stdout
    denied = run(runner, f"git clone -q http://evil.test:{plain.port}/repo.git cloned2")
    assert denied.exit_code != 0 and "403" in denied.stderr
    assert denied.error is not None and denied.error.type == "NetworkDenied"


def test_a_native_kernel_follows_each_calls_policy_deny_included_and_keeps_its_state(world, monkeypatch):
    runner, plain, _, _ = world
    monkeypatch.setenv("TEST_EGRESS_TOKEN", SECRET)
    session = runner.session()
    session.workspace.ensure()
    before = len(plain.requests)
    url = f"http://api.allowed.test:{plain.port}"
    fetch = ("import urllib.request\n"
             f"body = urllib.request.urlopen('{url}/echo-auth', timeout=30).read()\n"
             "calls = globals().get('calls', 0) + 1\n(calls, len(body))")
    credential = Credential(destinations=(f"http://api.allowed.test:{plain.port}",), env="TEST_EGRESS_TOKEN")

    def call(policy: EgressPolicy, **fields):
        return session.run_sync(fetch, language="python", provider="native", egress=policy, limits=LIMITS, **fields)

    first = call(ALLOW, credentials=(credential,))
    assert first.error is None, first.stderr
    [event] = first.network
    assert event.allowed and event.host == "api.allowed.test" and event.status == 200
    [(_, path, headers)] = plain.requests[before:]
    assert path == "/echo-auth" and headers["Authorization"] == f"Bearer {SECRET}"
    second = call(ALLOW)  # the same kernel, the next call's own decisions and no credential
    assert second.error is None and not second.kernel_restarted and second.value.startswith("(2, ")
    assert [e.allowed for e in second.network] == [True]
    assert "Authorization" not in plain.requests[-1][2]
    narrowed = call(EgressPolicy(mode="allowlist", allow=("other.allowed.test:*", "127.0.0.1:*")))
    assert not narrowed.kernel_restarted
    assert narrowed.error is not None and narrowed.error.type == "NetworkDenied"
    assert [(e.allowed, e.host) for e in narrowed.network] == [(False, "api.allowed.test")]
    denied = session.run_sync(fetch, language="python", provider="native", limits=LIMITS)  # the default: deny
    assert not denied.kernel_restarted  # the kernel keeps its socket: switching the network off keeps its state
    assert denied.error is not None and denied.error.type == "NetworkDenied" and "deny" in denied.error.message
    assert [(e.allowed, e.host) for e in denied.network] == [(False, "api.allowed.test")]
    assert denied.stderr.endswith(f"[wasm-runner] network policy deny: http://api.allowed.test:{plain.port} "
                                  "is not allowed; " + TURN_ON + "\n")
    assert call(ALLOW).value.startswith("(3, ")  # and switching it on again reaches the network, state intact


def test_a_background_process_has_the_cap_per_connection_follows_a_changed_policy_and_keeps_its_decisions(world):
    runner, plain, _, _ = world
    session = runner.session(egress=ALLOW)
    url = f"http://api.allowed.test:{plain.port}"
    fetch = "curl -sS -o /dev/null -w '%{http_code} %{size_download}\\n'"
    script = (f"{fetch} {url}/medium.bin; {fetch} {url}/medium.bin\n"  # together past the cap, each within
              f"{fetch} {url}/big 2>/dev/null || echo cut\n"
              "echo ready\n"
              "while [ ! -e /workspace/go ]; do sleep 0.05; done\n"
              f"{fetch} {url}/small\n")
    process = session.start_process(code=script)
    deadline = time.monotonic() + 30
    while "ready" not in process.text() and process.running and time.monotonic() < deadline:
        time.sleep(0.05)
    early = process.take_network()
    assert [(e.allowed, e.status) for e in early] == [(True, 200)] * 3, process.text("stderr")
    first, second, big = early
    assert first.bytes_received > MEDIUM and second.bytes_received > MEDIUM  # 2 x MEDIUM > CAP: not one budget
    assert "connection's network cap" in (big.reason or "") and big.bytes_sent + big.bytes_received == CAP

    session.set_egress(EgressPolicy(mode="allowlist", allow=("other.allowed.test:*", "127.0.0.1:*")))
    seen = len(plain.requests)
    (session.path / "go").touch()
    assert process.wait(30) == 0, process.text("stderr")
    lines = process.text().splitlines()
    assert lines[:2] == [f"200 {MEDIUM}", f"200 {MEDIUM}"] and lines[3] == "cut", lines
    assert int(lines[2].split()[1]) < CAP  # curl saw the big answer end early
    assert lines[-1].startswith("403"), lines
    assert len(plain.requests) == seen  # refused by the new policy before reaching the origin
    [late] = process.take_network()
    assert not late.allowed and late.host == "api.allowed.test" and "not in the allowlist" in (late.reason or "")
    assert process.take_network() == []  # each decision is given once


def test_a_background_process_started_under_deny_is_refused_by_name_and_follows_the_network_switched_on(world):
    runner, plain, _, _ = world
    session = runner.session()  # deny, the default
    fetch = f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://api.allowed.test:{plain.port}/small"
    process = session.start_process(code=f"{fetch}\nwhile [ ! -e /workspace/go ]; do sleep 0.05; done\n{fetch}\n")
    deadline = time.monotonic() + 30
    while not process.text() and process.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.text().splitlines() == ["403"], process.text("stderr")
    [refused] = process.take_network()
    assert not refused.allowed and refused.host == "api.allowed.test"
    session.set_egress(ALLOW)
    seen = len(plain.requests)
    (session.path / "go").touch()
    assert process.wait(30) == 0, process.text("stderr")
    assert process.text().splitlines() == ["403", "200"]
    assert len(plain.requests) == seen + 1
    assert [e.allowed for e in process.take_network()] == [True]


def test_a_running_process_hands_its_decisions_over_in_batches_and_the_rest_at_its_end(world, monkeypatch):
    runner, plain, _, _ = world
    monkeypatch.setattr(process_manager, "NETWORK_BATCH", 2)
    session = runner.session(egress=ALLOW)
    batches: list[tuple[str, int]] = []
    session.processes.observer = lambda event, process: batches.append(
        (event, len(process.take_network())) if event != "start" else (event, 0))
    script = f"for i in 1 2 3 4 5; do curl -sS -o /dev/null http://api.allowed.test:{plain.port}/small; done"
    process = session.start_process(code=script)
    assert process.wait(30) == 0, process.text("stderr")
    deadline = time.monotonic() + 5
    while ("exit", 1) not in batches and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [b for b in batches if b[0] != "start"] == [("network", 2), ("network", 2), ("exit", 1)]
