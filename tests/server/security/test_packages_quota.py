"""Installs count against the workspace's disk quota: checked before, and the usage measured afresh after."""

from __future__ import annotations

import asyncio

import pytest
from package_index import demo_wheels, serve_index

from wasm_runner.workspace.layout import tree_usage

QUOTA = 64 * 1024


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve_index(demo_wheels(tmp_path_factory.mktemp("wheels"))) as served:
        yield served


async def start(start_secure, index):
    index.reset()
    secure = await start_secure(auth={"quotas": {"disk_bytes": QUOTA}}, packages={"python_index": index.simple})
    status, created, _ = await secure.call("POST", "/v1/sessions", "a_member", json={})
    assert status == 201, created
    return secure, created["id"]


async def test_a_workspace_with_no_room_left_installs_nothing(start_secure, index):
    secure, sid = await start(start_secure, index)
    status, _, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/full.bin", "a_member", data=b"x" * QUOTA)
    assert status == 201
    status, body, _ = await secure.call("POST", f"/v1/sessions/{sid}/packages", "a_member",
                                        json={"python": ["tinyapp==1.0"]})
    assert status == 413 and body["error"]["code"] == "quota_exceeded", body
    assert "disk quota" in body["error"]["message"] and body["error"]["hint"]
    assert index.requests == []
    _, lock, _ = await secure.call("GET", f"/v1/sessions/{sid}/packages", "a_member")
    assert lock.get("python", []) == []  # an empty lock (omitted when empty)
    _, before, _ = await secure.call("GET", "/v1/sessions", "a_member")
    status, body, _ = await secure.call("POST", "/v1/sessions", "a_member", json={"packages": {"python": ["tinydep"]}})
    assert status == 413 and body["error"]["code"] == "quota_exceeded", body
    _, after, _ = await secure.call("GET", "/v1/sessions", "a_member")
    assert len(after["sessions"]) == len(before["sessions"]) == 1  # the refused one is not kept


async def test_an_install_larger_than_the_room_left_is_refused_as_a_result(start_secure, index):
    secure, sid = await start(start_secure, index)
    status, _, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/most.bin", "a_member", data=b"x" * (QUOTA - 100))
    assert status == 201
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/packages", "a_member",
                                          json={"python": ["tinyapp==1.0"]})
    assert status == 200 and not result["ok"] and result["error"]["kind"] == "quota", result
    assert "100 bytes" in result["error"]["message"] and result["installed"] == []


async def test_the_usage_after_an_install_counts_the_installed_packages(start_secure, index):
    secure, first = await start(start_secure, index)
    status, result, _ = await secure.call("POST", f"/v1/sessions/{first}/packages", "a_member",
                                          json={"python": ["tinyapp==1.0"]})
    assert status == 200 and result["ok"], result
    held = tree_usage([secure.data_dir / "sessions" / first])[0]
    assert held > 0
    await asyncio.sleep(2.1)  # past the workspace measurement's cache: the next install's check sees `held`
    _, created, _ = await secure.call("POST", "/v1/sessions", "a_member", json={})
    second = created["id"]
    status, result, _ = await secure.call("POST", f"/v1/sessions/{second}/packages", "a_member",
                                          json={"python": ["tinyapp==1.0"]})  # from the cache, at once
    assert status == 200 and result["ok"] and {p["source"] for p in result["installed"]} == {"cache"}
    # the workspace now holds about 2 * held: a write that fits beside `held` only must be refused
    status, body, _ = await secure.call("PUT", f"/v1/sessions/{second}/files/big.bin", "a_member",
                                        data=b"x" * (QUOTA - held - held // 2))
    assert status == 413 and body["error"]["code"] == "quota_exceeded", body
