"""Nothing acknowledged is lost: SIGKILL the service right after a burst of answered executions
and file writes, restart it on the same data directory, and find every audit row, every file
and the session's metadata (its next turn reporting that its kernel restarted); also when the
audit writer had committed none of the burst's rows (they are replayed from the journal)."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from pathlib import Path

import aiohttp
import pytest
from service_process import serving

from wasm_runner_server.cli.commands import add_keys_command

EXECUTIONS = 50
WRITES = 50


def create_key(data_dir: Path, capsys) -> str:
    """A key made the way an operator makes one: `wasm-runner keys create`."""
    parser = argparse.ArgumentParser()
    add_keys_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["keys", "create", "--workspace", "crash", "--name", "burst", "--kind", "member",
                              "--data-dir", str(data_dir)])
    assert args.handler(args) == 0
    return capsys.readouterr().out.strip()


@pytest.mark.asyncio
@pytest.mark.parametrize("slow_writer", [False, True], ids=["writer", "writer-behind"])
async def test_sigkill_after_acknowledged_burst_loses_no_audit_row_file_or_session(tmp_path, capsys, slow_writer):
    data_dir = tmp_path / "data"
    key = create_key(data_dir, capsys)
    headers = {"Authorization": f"Bearer {key}"}
    ran: dict[str, int] = {}
    written: dict[str, bytes] = {}
    async with serving(data_dir, slow_writer=slow_writer) as (process, url), \
            aiohttp.ClientSession(headers=headers) as http:
        async with http.post(url + "/v1/sessions", json={"ttl_s": 7200, "idle_timeout_s": 900,
                                                         "metadata": {"purpose": "crash"}}) as response:
            assert response.status == 201, await response.text()
            created = await response.json()
        sid = created["id"]

        async def execute(n: int) -> None:
            code = f"print('run-{n}')"
            async with http.post(f"{url}/v1/sessions/{sid}/exec", json={"code": code}) as response:
                body = await response.json()
            assert response.status == 200 and body["stdout"] == f"run-{n}\n", body
            ran[code] = n

        async def write(n: int) -> None:
            path, content = f"burst/file-{n}.txt", f"content {n}\n".encode() * (n + 1)
            async with http.put(f"{url}/v1/sessions/{sid}/files/{path}?mkdirs=true", data=content) as response:
                assert response.status in (200, 201), await response.text()
            written[path] = content

        # interleaved and concurrent, so the last answers come from batches committed together
        jobs = [job for n in range(max(EXECUTIONS, WRITES))
                for job in ((execute(n),) if n < EXECUTIONS else ()) + ((write(n),) if n < WRITES else ())]
        room = asyncio.Semaphore(8)

        async def limited(job) -> None:
            async with room:
                await job

        await asyncio.gather(*(limited(job) for job in jobs))
        process.kill()  # SIGKILL, at once: nothing gets to flush
        await process.wait()
    assert len(ran) == EXECUTIONS and len(written) == WRITES
    if slow_writer:  # the rows are in the journal only: the restart must replay them
        db = sqlite3.connect(data_dir / "audit.sqlite3")
        assert db.execute("SELECT COUNT(*) FROM audit").fetchone()[0] == 0
        db.close()
        assert len((data_dir / "audit.journal").read_bytes().splitlines()) == EXECUTIONS + WRITES

    async with serving(data_dir) as (_, url), aiohttp.ClientSession(headers=headers) as http:
        rows: list[dict] = []
        cursor = None
        while True:
            query = {"session": sid, "limit": "500", **({"cursor": cursor} if cursor else {})}
            async with http.get(url + "/v1/audit", params=query) as response:
                assert response.status == 200, await response.text()
                page = await response.json()
            rows += page["entries"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        audited = {row["code"] for row in rows if row["kind"] == "exec" and row["outcome"] == "ok"}
        missing = sorted(ran[code] for code in set(ran) - audited)
        assert not missing, f"{len(missing)} acknowledged executions have no audit row: {missing}"
        file_rows = {row["path"] for row in rows if row["kind"] == "file"}
        assert set(written) <= file_rows, sorted(set(written) - file_rows)

        for path, content in written.items():
            async with http.get(f"{url}/v1/sessions/{sid}/files/{path}") as response:
                assert response.status == 200 and await response.read() == content, path

        async with http.get(f"{url}/v1/sessions/{sid}") as response:
            assert response.status == 200
            restored = await response.json()
        for field in ("id", "profile", "created_at", "expires_at", "ttl_s", "idle_timeout_s", "metadata"):
            assert restored[field] == created[field], field
        # the kernel that held the burst's state is gone, and the session's next turn says so
        async with http.post(f"{url}/v1/sessions/{sid}/exec", json={"code": "print('after')"}) as response:
            body = await response.json()
        assert response.status == 200 and body["stdout"] == "after\n" and body["kernel_restarted"] is True, body
