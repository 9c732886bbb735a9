"""Quotas that hold: every writable place counts, API writes reserve before writing, deep
trees are measured and removed, and a workspace over quota can still delete."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from deep_tree import DEPTH, NAME, build_deep_tree

from wasm_runner.workspace.history import HISTORY_DIR
from wasm_runner.workspace.layout import tree_usage

MiB = 1024 * 1024
TIGHT = {"auth": {"quotas": {"disk_bytes": MiB}},
         "profiles": {"small": {"language": "python", "limits": {"disk_bytes": 4 * MiB}},
                      "small-bash": {"language": "bash", "provider": "native", "limits": {"disk_bytes": 4 * MiB}}}}
native = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the native provider needs bubblewrap")


def shared_bytes(data_dir: Path, workspace: str = "alpha") -> int:
    return tree_usage([data_dir / "workspaces" / workspace / "shared"])[0]


async def session(secure, profile: str | None = None, key: str = "a_member") -> str:
    status, body, _ = await secure.call("POST", "/v1/sessions", key, json={"profile": profile} if profile else {})
    assert status == 201, body
    return body["id"]


async def test_a_wasm_guest_writing_into_shared_stops_at_the_workspace_quota(start_secure):
    secure = await start_secure(**TIGHT)
    sid = await session(secure, "small")
    # Paced so the watcher's period (not the disk's speed) bounds what gets past the quota.
    code = ("import time\nchunk = b'x' * (1 << 20)\n"
            "with open('/workspace/shared/big.bin', 'wb') as f:\n"
            "    for _ in range(64):\n"
            "        f.write(chunk); f.flush(); time.sleep(0.01)\n")
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": code})
    assert status == 200 and result["limit"] == "disk", result
    assert shared_bytes(secure.data_dir) < 32 * MiB
    status, body, _ = await secure.call("PUT", "/v1/shared/files/more.bin", "a_member", data=b"y" * 10)
    assert status in (413, 429), body  # over quota: refused
    status, _, _ = await secure.call("DELETE", "/v1/shared/files/big.bin", "a_member")
    assert status == 200 and shared_bytes(secure.data_dir) == 0


@native
@pytest.mark.parametrize("place", ["/workspace/shared", "/tmp"])
async def test_a_native_guest_writing_into_shared_or_tmp_stops_at_the_limit(start_secure, place):
    secure = await start_secure(**TIGHT)
    sid = await session(secure, "small-bash")
    code = f"for i in $(seq 64); do head -c 1048576 /dev/zero > {place}/f$i || exit 9; sleep 0.01; done"
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member",
                                          json={"code": code, "language": "bash"})
    assert status == 200 and result["limit"] == "disk", result
    held = shared_bytes(secure.data_dir) + tree_usage([secure.data_dir / "sessions" / sid])[0]
    assert held < 32 * MiB


DEEP_TREE = """n=$(printf 'd%.0s' $(seq {name}))
for i in $(seq {levels}); do mkdir -p "$n" && cd "$n" && head -c {size} /dev/zero > f || exit 9; done
echo built $i"""


@native
async def test_a_deep_tree_of_long_names_is_measured_limited_and_deleted(start_secure):
    """A guest builds 300 levels of 250-character names (far past PATH_MAX, with cd): the tree
    is counted, a guest growing it is stopped at the limit, and deleting the session removes it."""
    secure = await start_secure(**TIGHT)
    sid = await session(secure, "small-bash")
    slow_machine = {"timeout_s": 120}  # 900 process starts: far more than the default 10 s on a loaded machine
    build = {"code": DEEP_TREE.format(name=NAME, levels=DEPTH, size=3000), "language": "bash", "limits": slow_machine}
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json=build)
    assert status == 200 and result["stdout"] == f"built {DEPTH}\n" and result["limit"] is None, result
    # counted: 900 kB of the 1 MiB workspace quota, so 200 kB more cannot be written
    status, body, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/b.bin", "a_member", data=b"b" * 200_000)
    assert status == 413 and body["error"]["code"] == "quota_exceeded", body
    # a guest growing it past the session's 4 MiB (15 kB a level, deeper still) is stopped
    grow = {"code": DEEP_TREE.format(name=NAME, levels=2 * DEPTH, size=15_000), "language": "bash", "limits": slow_machine}
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json=grow)
    assert status == 200 and result["limit"] == "disk", result
    status, body, _ = await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member")
    assert 200 <= status < 300, body
    assert not (secure.data_dir / "sessions" / sid).exists()


async def test_session_delete_removes_a_chain_deeper_than_the_recursion_limit(start_secure):
    secure = await start_secure()
    sid = await session(secure)
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/a.txt", "a_member", data=b"a"))[0] == 201
    build_deep_tree(secure.data_dir / "sessions" / sid / "files", depth=1500, name_len=30, file_bytes=1)
    status, body, _ = await secure.call("DELETE", f"/v1/sessions/{sid}", "a_member")
    assert 200 <= status < 300, body
    assert not (secure.data_dir / "sessions" / sid).exists()


async def test_a_recursive_file_delete_removes_a_tree_past_path_max(start_secure):
    secure = await start_secure()
    sid = await session(secure)
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/top/a.txt", "a_member", data=b"a"))[0] == 201
    build_deep_tree(secure.data_dir / "sessions" / sid / "files" / "top")
    status, body, _ = await secure.call("DELETE", f"/v1/sessions/{sid}/files/top", "a_member",
                                        params={"recursive": "true"})
    assert status == 200, body
    assert os.listdir(secure.data_dir / "sessions" / sid / "files") == []


def counted(session_dir: Path) -> int:
    """The bytes of a session the quota counts: all but its file history (bounded by [history] instead)."""
    return tree_usage([session_dir])[0] - tree_usage([session_dir / HISTORY_DIR])[0]


async def test_concurrent_uploads_cannot_pass_the_workspace_quota(start_secure):
    secure = await start_secure(auth={"quotas": {"disk_bytes": MiB}})
    sids = [await session(secure) for _ in range(2)]
    size = 300_000  # each fits alone; eight of them are 2.4 MB
    puts = [secure.call("PUT", f"/v1/sessions/{sids[i % 2]}/files/f{i}.bin", "a_member", data=os.urandom(size))
            for i in range(8)]
    statuses = [status for status, _, _ in await asyncio.gather(*puts)]
    assert statuses.count(201) == 3 and statuses.count(413) == 5, statuses
    held = sum(counted(secure.data_dir / "sessions" / s) for s in sids)
    assert held <= MiB


async def test_concurrent_streamed_uploads_reserve_as_bytes_arrive(start_secure):
    """No Content-Length: each upload reserves chunk by chunk and is cut off at the quota."""
    secure = await start_secure(auth={"quotas": {"disk_bytes": MiB}})
    sid = await session(secure)

    async def stream(n: int):
        for _ in range(n):
            yield b"z" * 65536
            await asyncio.sleep(0)

    puts = [secure.call("PUT", f"/v1/sessions/{sid}/files/s{i}.bin", "a_member", data=stream(6)) for i in range(6)]
    statuses = [status for status, _, _ in await asyncio.gather(*puts)]
    assert statuses.count(201) == 2 and set(statuses) <= {201, 413}, statuses
    assert counted(secure.data_dir / "sessions" / sid) <= MiB


async def test_presigned_puts_go_through_the_same_reservation(start_secure):
    secure = await start_secure(auth={"quotas": {"disk_bytes": MiB}})
    sid = await session(secure)
    urls = []
    for i in range(6):
        status, link, _ = await secure.call("POST", f"/v1/sessions/{sid}/files/p{i}.bin:presign", "a_member",
                                            json={"method": "PUT"})
        assert status == 200, link
        urls.append(link["url"])
    results = await asyncio.gather(*(secure.call("PUT", url, data=b"p" * 400_000) for url in urls))
    statuses = [status for status, _, _ in results]
    assert statuses.count(201) == 2 and statuses.count(413) == 4, statuses
    refused = next(body for status, body, _ in results if status == 413)
    assert refused["error"]["code"] == "quota_exceeded" and "quota" in refused["error"]["message"]
    assert counted(secure.data_dir / "sessions" / sid) <= MiB


async def test_an_exponential_patch_is_refused_before_it_is_built(start_secure):
    secure = await start_secure(**TIGHT)
    sid = await session(secure, "small")
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/a.txt", "a_member", data=b"a"))[0] == 201
    edits = [{"old_text": "a", "new_text": "aa", "replace_all": True}] * 24  # 1 byte -> 16 MiB
    status, body, _ = await secure.call("PATCH", f"/v1/sessions/{sid}/files/a.txt", "a_member",
                                        json={"edits": edits})
    assert status == 413 and body["error"]["code"] == "quota_exceeded", body
    assert "bytes" in body["error"]["message"] and body["error"]["hint"]
    assert (secure.data_dir / "sessions" / sid / "files" / "a.txt").read_bytes() == b"a"
    status, body, _ = await secure.call("PATCH", f"/v1/sessions/{sid}/files/a.txt", "a_member",
                                        json={"edits": edits[:10]})
    assert status == 200 and body["size"] == 1024, body


async def test_a_patch_past_the_file_size_limit_is_refused(start_secure):
    secure = await start_secure(server={"max_file_bytes": 4096})
    sid = await session(secure)
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/a.txt", "a_member", data=b"ab"))[0] == 201
    status, body, _ = await secure.call("PATCH", f"/v1/sessions/{sid}/files/a.txt", "a_member",
                                        json={"old_text": "a", "new_text": "a" * 5000})
    assert status == 413 and body["error"]["code"] == "file_too_large" and "4096" in body["error"]["message"], body


async def test_a_workspace_over_quota_can_delete_to_free_space(start_secure):
    secure = await start_secure(auth={"quotas": {"disk_bytes": 1000}})
    sid = await session(secure)
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/a.bin", "a_member", data=b"x" * 1000))[0] == 201
    # pushed over by something outside the API (a guest, or a lowered quota)
    (secure.data_dir / "sessions" / sid / "files" / "b.bin").write_bytes(b"y" * 5000)
    await asyncio.sleep(2.1)  # the workspace's usage figure is cached briefly
    status, body, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/c.bin", "a_member", data=b"z")
    assert status == 429 and body["error"]["code"] == "workspace_disk_quota", body
    status, body, _ = await secure.call("DELETE", f"/v1/sessions/{sid}/files/b.bin", "a_member")
    assert status == 200, body
    status, body, _ = await secure.call("DELETE", f"/v1/sessions/{sid}/files/a.bin", "a_member")
    assert status == 200, body
    await asyncio.sleep(2.1)
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/c.bin", "a_member", data=b"z"))[0] == 201


async def test_shared_writes_reserve_against_the_workspace_quota(start_secure):
    secure = await start_secure(auth={"quotas": {"disk_bytes": MiB}})
    sid = await session(secure)
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/a.bin", "a_member", data=b"x" * 700_000))[0] == 201
    status, body, _ = await secure.call("PUT", "/v1/shared/files/s.bin", "a_member", data=b"s" * 400_000)
    assert status == 413 and body["error"]["code"] == "quota_exceeded", body
    assert (await secure.call("PUT", "/v1/shared/files/s.bin", "a_member", data=b"s" * 300_000))[0] == 201


async def test_a_usage_that_cannot_be_measured_refuses_writes_and_stops_guests(start_secure, monkeypatch):
    from wasm_runner.workspace import layout as workspace_module

    # the run itself meets the failure, not the 429 check; the failure is injected into this
    # process's walk, so the kernel runs here too
    secure = await start_secure(auth={"enabled": False}, workers={"kernel_workers": 0})
    status, created, _ = await secure.call("POST", "/v1/sessions", json={})
    sid = created["id"]
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/a.txt", data=b"a"))[0] == 201
    real = workspace_module.walk_tree

    def too_long(top=None, **kwargs):
        if top is not None and "sessions" in str(top):
            raise OSError(36, "File name too long")
        return real(top, **kwargs)

    monkeypatch.setattr(workspace_module, "walk_tree", too_long)
    status, body, _ = await secure.call("PUT", f"/v1/sessions/{sid}/files/b.txt", data=b"b")
    assert status == 413 and body["error"]["code"] == "quota_unmeasurable" and body["error"]["hint"], body
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec",
                                          json={"code": "import time\ntime.sleep(0.3)\nprint('ran on')"})
    assert status == 200 and result["limit"] == "disk", result
    status, body, _ = await secure.call("DELETE", f"/v1/sessions/{sid}/files/a.txt")
    assert status == 200, body  # deleting still works
