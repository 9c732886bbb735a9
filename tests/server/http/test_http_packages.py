"""Packages over HTTP: installs a session keeps (kernel, fresh, hibernation, restart), its lock, the policy."""

from __future__ import annotations

import pytest
from package_index import demo_wheels, serve_index
from server_helpers import assert_error_shape, call, eventually, new_session, run

HELLO = "import tinyapp\ntinyapp.hello()"
EXPECTED = "'hello from tinyapp, tinydep 2.1'"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as served:
        yield served


@pytest.fixture
def packages(index):
    index.reset()
    return {"python_index": index.simple}


async def test_install_then_import_in_kernel_fresh_after_hibernation_and_restart(serve, index, packages):
    first = await serve(packages=packages, sessions={"idle_timeout_s": 0.5})
    sid = await new_session(first)
    assert (await run(first, sid, "kept = 1"))["exit_code"] == 0
    status, result = await call(first, "POST", f"/v1/sessions/{sid}/packages", json={"python": ["tinyapp==1.0"]})
    assert status == 200 and result["ok"], result
    assert {(p["name"], p["version"], p["source"]) for p in result["installed"]} == {
        ("tinyapp", "1.0", "download"), ("tinydep", "2.1", "download")}
    assert all(len(p["sha256"]) == 64 and p["size"] > 0 for p in result["installed"]) and result["duration_ms"] > 0
    in_kernel = await run(first, sid, HELLO)
    assert in_kernel["value"] == EXPECTED and in_kernel["kernel_restarted"] is False
    assert (await run(first, sid, HELLO, fresh=True))["value"] == EXPECTED

    async def hibernated() -> bool:
        return (await call(first, "GET", f"/v1/sessions/{sid}"))[1]["state"] == "hibernated"

    await eventually(hibernated, timeout=10)
    after = await run(first, sid, HELLO + "\nkept")
    assert after["kernel_restored"] is True and after["value"] == "1"  # the kernel came back with its state
    assert (await run(first, sid, HELLO))["value"] == EXPECTED
    await first.close()

    second = await serve(packages=packages)  # same data directory: a restart
    assert (await run(second, sid, HELLO))["value"] == EXPECTED
    status, lock = await call(second, "GET", f"/v1/sessions/{sid}/packages")
    assert status == 200 and [(p["name"], p["version"]) for p in lock["python"]] == [("tinyapp", "1.0"), ("tinydep", "2.1")]


async def test_a_second_session_installs_from_the_cache_without_the_index(serve, index, packages):
    client = await serve(packages=packages)
    first, second = await new_session(client), await new_session(client)
    assert (await call(client, "POST", f"/v1/sessions/{first}/packages", json={"python": ["tinyapp==1.0"]}))[1]["ok"]
    index.reset()
    status, result = await call(client, "POST", f"/v1/sessions/{second}/packages", json={"python": ["tinyapp==1.0"]})
    assert status == 200 and result["ok"] and {p["source"] for p in result["installed"]} == {"cache"}
    assert result["index_requests"] == 0 and index.requests == []
    assert (await run(client, second, HELLO))["value"] == EXPECTED


async def test_a_lock_given_at_creation_recreates_the_environment(serve, index, packages):
    client = await serve(packages=packages)
    source = await new_session(client)
    await call(client, "POST", f"/v1/sessions/{source}/packages", json={"python": ["tinyapp==1.0", "tinydep==2.0"]})
    _, lock = await call(client, "GET", f"/v1/sessions/{source}/packages")
    replayed = await new_session(client, packages={"lock": lock})
    assert (await run(client, replayed, HELLO))["value"] == "'hello from tinyapp, tinydep 2.0'"
    _, again = await call(client, "GET", f"/v1/sessions/{replayed}/packages")
    assert again["python"] == lock["python"]


async def test_refusals_are_results_with_the_reason(serve, index, packages):
    client = await serve(packages=packages)
    sid = await new_session(client)
    status, native = await call(client, "POST", f"/v1/sessions/{sid}/packages", json={"python": ["fastext"]})
    assert status == 200 and not native["ok"] and native["error"]["kind"] == "native_code"
    assert "fastext" in native["error"]["message"] and "python-data" in native["error"]["hint"]
    _, missing = await call(client, "POST", f"/v1/sessions/{sid}/packages", json={"python": ["nosuch"]})
    assert missing["error"]["kind"] == "not_found"
    _, other = await call(client, "POST", f"/v1/sessions/{sid}/packages",
                          json={"python": ["tinydep"], "index": "https://evil.test/simple/"})
    assert other["error"]["kind"] == "index_not_allowed"
    status, empty = await call(client, "POST", f"/v1/sessions/{sid}/packages", json={})
    assert status == 422
    assert_error_shape(empty, "validation_error")


async def test_a_failed_install_at_creation_leaves_no_session(serve, index, packages):
    client = await serve(packages=packages)
    status, data = await call(client, "POST", "/v1/sessions", json={"id": "with-bad-packages",
                                                                    "packages": {"python": ["fastext"]}})
    assert status == 422
    assert_error_shape(data, "packages_failed")
    assert (await call(client, "GET", "/v1/sessions/with-bad-packages"))[0] == 404


async def test_a_custom_index_the_network_policy_does_not_allow_is_refused(serve, index, tmp_path):
    index.reset()
    profiles = {"pkg": {"language": "python", "packages": {"allow_custom_index": True}}}
    client = await serve(packages={"python_index": "https://pypi.org/simple/"}, profiles=profiles)
    sid = await new_session(client, profile="pkg")
    status, result = await call(client, "POST", f"/v1/sessions/{sid}/packages",
                                json={"python": ["tinydep"], "index": index.simple})
    assert status == 200 and result["error"]["kind"] == "denied_by_policy" and index.requests == []
    allowing = {"pkg": {"language": "python", "packages": {"allow_custom_index": True},
                        "network": {"mode": "allowlist", "allow": [index.url]}}}
    client = await serve(tmp_path / "other", packages={"python_index": "https://pypi.org/simple/"}, profiles=allowing)
    sid = await new_session(client, profile="pkg")
    _, allowed = await call(client, "POST", f"/v1/sessions/{sid}/packages",
                            json={"python": ["tinydep"], "index": index.simple})
    assert allowed["ok"], allowed


async def test_the_configured_loopback_index_stays_reachable_under_an_open_policy(serve, index, packages):
    profiles = {"open": {"language": "python", "network": "open"}}
    client = await serve(packages=packages, profiles=profiles)
    sid = await new_session(client, profile="open")
    status, result = await call(client, "POST", f"/v1/sessions/{sid}/packages", json={"python": ["tinyapp==1.0"]})
    assert status == 200 and result["ok"], result  # an open policy alone refuses loopback addresses
    assert index.requests and (await run(client, sid, HELLO))["value"] == EXPECTED


async def test_the_guest_installs_through_the_host_under_the_profiles_policy(serve, index, packages):
    client = await serve(packages=packages)
    sid = await new_session(client)
    result = await run(client, sid, "import sandbox\nsandbox.install('tinyapp==1.0')\nimport tinyapp\ntinyapp.hello()")
    assert result["value"] == EXPECTED, result["stderr"]
    _, lock = await call(client, "GET", f"/v1/sessions/{sid}/packages")
    assert [p["name"] for p in lock["python"]] == ["tinyapp", "tinydep"]
    denied = await run(client, sid, f"import sandbox\nsandbox.install('tinydep', index={'https://evil.test/simple/'!r})")
    assert denied["error"]["type"] == "RuntimeError" and "configured index only" in denied["error"]["message"]



async def test_an_index_the_policy_denies_is_refused_from_inside_the_guest(serve, index):
    index.reset()
    profiles = {"pkg": {"language": "python", "packages": {"allow_custom_index": True}}}
    client = await serve(packages={"python_index": "https://pypi.org/simple/"}, profiles=profiles)
    sid = await new_session(client, profile="pkg")
    denied = await run(client, sid, f"import sandbox\nsandbox.install('tinydep', index={index.simple!r})")
    assert denied["error"]["type"] == "RuntimeError" and "not allowed" in denied["error"]["message"], denied
    assert index.requests == []  # the host refused before any request left
    assert (await run(client, sid, "1 + 1"))["value"] == "2"


async def test_a_lock_or_requirement_smuggling_a_requirement_file_option_is_a_422(serve, index, packages, tmp_path):
    client = await serve(packages=packages)
    sid = await new_session(client)
    _, good = await call(client, "POST", f"/v1/sessions/{sid}/packages", json={"python": ["tinydep==2.0"]})
    entry = dict(good["lock"]["python"][0])
    secret = tmp_path / "presign.secret"
    secret.write_text("the-signing-secret\n")
    hostile = [{**entry, "version": f"2.0\n-r {secret}"}, {**entry, "name": f"tinydep==2.0\n-e {tmp_path}\nx"},
               {**entry, "url": f"file://{secret}"}, {**entry, "filename": "../tinydep-2.0-py3-none-any.whl"}]
    for bad in hostile:
        for path, body in ((f"/v1/sessions/{sid}/packages", {"lock": {"python": [bad]}}),
                           ("/v1/sessions", {"packages": {"lock": {"python": [bad]}}})):
            status, data = await call(client, "POST", path, json=body)
            assert status == 422, (bad, data)
            assert_error_shape(data, "validation_error")
            assert "the-signing-secret" not in str(data)
    for text in (f"-r {secret}", f"-e {tmp_path}", f"tinydep\n-e {tmp_path}", "--index-url=http://127.0.0.1:1/"):
        status, data = await call(client, "POST", f"/v1/sessions/{sid}/packages", json={"python": [text]})
        assert status == 422, (text, data)
    status, data = await call(client, "POST", f"/v1/sessions/{sid}/packages",
                              json={"python": ["tinydep"], "index": "http://127.0.0.1:1/simple/\n-e /x"})
    assert status == 422
    _, lock = await call(client, "GET", f"/v1/sessions/{sid}/packages")
    assert [(p["name"], p["version"]) for p in lock["python"]] == [("tinydep", "2.0")]

