"""Quotas are one budget: a run's disk limit is the least of its disk_bytes and its workspace's
room (reserved while it runs), shared/ and a background process's /tmp count, a full session can
always delete, and a run stopped for time says so."""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest

from wasm_runner.workspace.layout import tree_usage

MiB = 1024 * 1024
native = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the native provider needs bubblewrap")

# Each guest writes 1 MiB at a time, paced, so the watcher's period (not the disk's speed) bounds
# what gets past a limit.
FILL = ("import time\nchunk = b'x' * (1 << 20)\n"
        "with open({path!r}, 'wb') as f:\n"
        "    for _ in range({mib}):\n"
        "        f.write(chunk); f.flush(); time.sleep(0.02)\n")
FILL_BASH = "for i in $(seq {mib}); do head -c 1048576 /dev/zero >> {path} || exit 9; sleep 0.02; done"


def config(quota: int, disk_bytes: int) -> dict:
    limits = {"disk_bytes": disk_bytes}
    return {"auth": {"quotas": {"disk_bytes": quota, "concurrent_executions": 4}},
            "profiles": {"py": {"language": "python", "limits": limits},
                         "data": {"language": "python", "provider": "native", "limits": limits},
                         "sh": {"language": "bash", "provider": "native", "limits": limits}}}


async def session(secure, profile: str) -> str:
    status, body, _ = await secure.call("POST", "/v1/sessions", "a_member", json={"profile": profile})
    assert status == 201, body
    return body["id"]


async def run(secure, sid: str, code: str, **body) -> dict:
    status, result, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", "a_member", json={"code": code, **body})
    assert status == 200, result
    return result


def session_bytes(secure, sid: str) -> int:
    return tree_usage([secure.data_dir / "sessions" / sid / "files", secure.data_dir / "sessions" / sid / "tmp"])[0]


def shared_bytes(secure) -> int:
    return tree_usage([secure.data_dir / "workspaces" / "alpha" / "shared"])[0]


@pytest.mark.parametrize("kernel_workers", [0, 1], ids=["in-process", "worker-process"])
async def test_a_run_stops_at_the_workspace_room_not_at_its_disk_bytes(start_secure, kernel_workers):
    secure = await start_secure(**config(quota=8 * MiB, disk_bytes=256 * MiB), workers={"kernel_workers": kernel_workers})
    sid = await session(secure, "py")
    result = await run(secure, sid, FILL.format(path="/workspace/big.bin", mib=64))
    assert result["limit"] == "disk", result
    assert session_bytes(secure, sid) < 12 * MiB  # the room (8 MiB) and a watcher period, not 64 MiB
    assert "/workspace/big.bin" in result["error"]["message"], result["error"]


async def test_two_concurrent_runs_cannot_together_pass_the_quota(start_secure):
    secure = await start_secure(**config(quota=8 * MiB, disk_bytes=256 * MiB))
    first, second = await session(secure, "py"), await session(secure, "py")
    code = FILL.format(path="/workspace/big.bin", mib=24)
    results = await asyncio.gather(run(secure, first, code), run(secure, second, code))
    assert all(r["limit"] == "disk" for r in results), results
    assert session_bytes(secure, first) + session_bytes(secure, second) < 14 * MiB


async def test_a_wasi_run_writing_into_shared_past_its_disk_bytes_is_stopped(start_secure):
    secure = await start_secure(**config(quota=256 * MiB, disk_bytes=4 * MiB))
    sid = await session(secure, "py")
    result = await run(secure, sid, FILL.format(path="/workspace/shared/big.bin", mib=32))
    assert result["limit"] == "disk", result
    assert shared_bytes(secure) < 8 * MiB


@native
async def test_a_background_process_filling_tmp_counts_against_the_budget(start_secure):
    secure = await start_secure(**config(quota=8 * MiB, disk_bytes=256 * MiB))
    sid = await session(secure, "sh")
    code = FILL_BASH.format(mib=64, path="/tmp/fill") + "; sleep 60"
    status, info, _ = await secure.call("POST", f"/v1/sessions/{sid}/processes", "a_member",
                                        json={"code": code, "language": "bash"})
    assert status in (200, 201), info
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, info, _ = await secure.call("GET", f"/v1/sessions/{sid}/processes/{info['id']}", "a_member")
        if info["state"] not in ("starting", "running"):
            break
        await asyncio.sleep(0.1)
    assert info["state"] not in ("starting", "running"), info
    assert "quota" in (info.get("error") or ""), info
    assert session_bytes(secure, sid) < 12 * MiB


async def test_a_full_session_recovers_from_python_by_deleting(start_secure):
    secure = await start_secure(**config(quota=256 * MiB, disk_bytes=4 * MiB))
    sid = await session(secure, "py")
    filled = await run(secure, sid, FILL.format(path="/workspace/big.bin", mib=16))
    assert filled["limit"] == "disk" and "/workspace/big.bin" in filled["error"]["message"], filled
    assert session_bytes(secure, sid) > 4 * MiB  # left over its limit
    removed = await run(secure, sid, "import os\nos.remove('/workspace/big.bin')\nprint('freed')")
    assert removed["limit"] is None and removed["stdout"] == "freed\n", removed
    ok = await run(secure, sid, "open('/workspace/small.txt', 'w').write('hi')\nprint('ok')")
    assert ok["limit"] is None and ok["stdout"] == "ok\n", ok


@native
async def test_a_full_session_recovers_from_bash_by_deleting(start_secure):
    secure = await start_secure(**config(quota=256 * MiB, disk_bytes=4 * MiB))
    sid = await session(secure, "sh")
    filled = await run(secure, sid, FILL_BASH.format(mib=16, path="/workspace/big.bin"), language="bash")
    assert filled["limit"] == "disk" and "/workspace/big.bin" in filled["error"]["message"], filled
    assert "rm /workspace/big.bin" in filled["error"]["message"]
    removed = await run(secure, sid, "rm /workspace/big.bin && echo freed", language="bash")
    assert removed["limit"] is None and removed["stdout"] == "freed\n", removed
    ok = await run(secure, sid, "echo hi > /workspace/small.txt && echo ok", language="bash")
    assert ok["limit"] is None and ok["stdout"] == "ok\n", ok


async def test_a_busy_loop_in_a_session_over_its_limit_times_out(start_secure):
    secure = await start_secure(**config(quota=256 * MiB, disk_bytes=4 * MiB))
    sid = await session(secure, "py")
    filled = await run(secure, sid, FILL.format(path="/workspace/big.bin", mib=16))
    assert filled["limit"] == "disk", filled
    idle = await run(secure, sid, "print('nothing written')")
    assert idle["limit"] is None, idle  # over its limit, but this run writes nothing
    spun = await run(secure, sid, "while True:\n    pass\n", limits={"timeout_s": 1})
    assert spun["limit"] == "timeout", spun


async def test_a_workspace_over_its_quota_can_still_run_code_that_deletes(start_secure):
    secure = await start_secure(**config(quota=4 * MiB, disk_bytes=256 * MiB))
    sid = await session(secure, "py")
    assert (await secure.call("PUT", f"/v1/sessions/{sid}/files/a.txt", "a_member", data=b"a"))[0] == 201
    (secure.data_dir / "sessions" / sid / "files" / "big.bin").write_bytes(b"x" * (6 * MiB))  # e.g. a lowered quota
    await asyncio.sleep(2.1)  # the workspace's usage figure is cached briefly
    grow = await run(secure, sid, "open('/workspace/more.bin', 'wb').write(b'y' * (1 << 20))")
    assert grow["limit"] == "disk", grow  # no room to grow
    removed = await run(secure, sid, "import os\nos.remove('/workspace/big.bin')\nprint('freed')")
    assert removed["limit"] is None and removed["stdout"] == "freed\n", removed
    ok = await run(secure, sid, "open('/workspace/small.txt', 'w').write('hi')\nprint('ok')")
    assert ok["limit"] is None and ok["stdout"] == "ok\n", ok


@native
async def test_a_full_python_data_session_recovers_by_deleting(start_secure):
    secure = await start_secure(**config(quota=256 * MiB, disk_bytes=4 * MiB))
    sid = await session(secure, "data")
    filled = await run(secure, sid, FILL.format(path="/workspace/big.bin", mib=16), limits={"timeout_s": 60})
    assert filled["limit"] == "disk" and "/workspace/big.bin" in filled["error"]["message"], filled
    removed = await run(secure, sid, "import os\nos.remove('/workspace/big.bin')\nprint('freed')",
                        limits={"timeout_s": 60})
    assert removed["limit"] is None and removed["stdout"] == "freed\n", removed
    ok = await run(secure, sid, "open('small.txt', 'w').write('hi')\nprint('ok')", limits={"timeout_s": 60})
    assert ok["limit"] is None and ok["stdout"] == "ok\n", ok
