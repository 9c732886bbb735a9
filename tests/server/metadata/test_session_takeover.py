"""Three service processes on one PostgreSQL, storing sessions in one S3 server or in one shared directory
(the shared-POSIX mode): any node serves a session (forwarding), a session outlives its node (kill -9),
and a node paused past its lease (SIGSTOP) acknowledges nothing once another node took the session over."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import httpx
import psycopg
from cluster_nodes import admin_auth, node_files
from server_helpers import eventually
from service_process import serving
from yarl import URL

from wasm_runner_server.storage import ObjectStorage, StorageSettings

WAIT_S = 60.0


def _holder(url: str, session: str) -> tuple[str, int, float]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT node, epoch, expires_at - extract(epoch from clock_timestamp()) FROM leases "
                           "WHERE session_id = %s", (session,)).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def _metrics(text: str) -> dict[str, float]:
    """The unlabelled samples of a /metrics page."""
    return {name: float(value) for name, _, value in (line.partition(" ") for line in text.splitlines())
            if name and not name.startswith("#") and "{" not in name}


async def _until_served(http: httpx.AsyncClient, url: str, session: str, code: str, headers) -> httpx.Response:
    """Call through `url` until it stops answering 503 (the owner does not answer, its lease still live),
    within a bound."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = await http.post(f"{url}/v1/sessions/{session}/exec", json={"code": code}, headers=headers)
        if answer.status_code != 503:
            return answer
        assert answer.json()["error"]["code"] == "session_node_unavailable" and answer.headers["Retry-After"]
        assert time.monotonic() < deadline, answer.text
        await asyncio.sleep(0.1)


async def test_a_session_survives_its_node_and_a_stale_owner_acknowledges_nothing(postgres_url, storage, tmp_path):
    nodes = [node_files(tmp_path, postgres_url, name, storage) for name in ("node-1", "node-2", "node-3")]
    async with contextlib.AsyncExitStack() as stack:
        served = await asyncio.gather(*(stack.enter_async_context(serving(d, config=c)) for d, c in nodes))
        (proc_1, url_1), (proc_2, url_2), (proc_3, url_3) = served

        auth = admin_auth(postgres_url, nodes[0][0], "team")

        async with httpx.AsyncClient(timeout=120) as http:
            created = await http.post(f"{url_1}/v1/sessions", json={}, headers=auth)
            assert created.status_code == 201, created.text
            session = created.json()["id"]
            ran = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={
                "code": "x = 42\nwith open('data.txt', 'w') as f:\n    f.write('written by a call')\nprint(x)"})
            assert ran.status_code == 200 and ran.json()["stdout"] == "42\n", ran.text
            put = await http.put(f"{url_1}/v1/sessions/{session}/files/notes/api.txt", content=b"written by the API",
                                 headers=auth)
            assert put.status_code == 201, put.text

            # node-1's lease is live: the others forward its calls there
            elsewhere = await http.post(f"{url_2}/v1/sessions/{session}/exec", json={"code": "print(x)"}, headers=auth)
            assert elsewhere.status_code == 200 and elsewhere.json()["stdout"] == "42\n", elsewhere.text
            read = await http.get(f"{url_3}/v1/sessions/{session}/files/notes/api.txt", headers=auth)
            assert read.status_code == 200 and read.content == b"written by the API"
            assert _holder(postgres_url, session)[:2] == ("node-1", 1)  # nothing moved

            # a background process runs on node-1 (and one that ended already)
            for command in (["sleep", "600"], ["true"]):
                started = await http.post(f"{url_1}/v1/sessions/{session}/processes", headers=auth,
                                          json={"command": command, "name": command[0]})
                assert started.status_code == 201, started.text

            async def true_ended() -> bool:
                ended = await http.get(f"{url_1}/v1/sessions/{session}/processes/p2", headers=auth)
                return ended.json()["state"] == "exited"

            await eventually(true_ended, timeout=20)
            stored = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={"code": "1"})
            assert stored.status_code == 200  # a call stores the session, its process list with it

            # node-1 dies: after its lease, node-2 takes the session over with its files and its kernel
            proc_1.kill()
            await proc_1.wait()
            deadline = time.monotonic() + WAIT_S
            while _holder(postgres_url, session)[2] > 0:  # node-1's lease runs out
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            rival_auth = admin_auth(postgres_url, nodes[0][0], "rival")
            hidden = await http.post(f"{url_3}/v1/sessions/{session}/exec", json={"code": "1"}, headers=rival_auth)
            assert hidden.status_code == 404  # another workspace's request takes nothing over
            assert _holder(postgres_url, session)[:2] == ("node-1", 1)
            taken = await _until_served(http, url_2, session, "with open('data.txt') as f:\n    print(x, f.read())", auth)
            assert taken.status_code == 200, taken.text
            assert taken.json()["stdout"] == "42 written by a call\n", taken.text
            assert not taken.json().get("kernel_restarted"), taken.text
            read = await http.get(f"{url_2}/v1/sessions/{session}/files/notes/api.txt", headers=auth)
            assert read.status_code == 200 and read.content == b"written by the API"
            node, epoch_2, _ = _holder(postgres_url, session)
            assert (node, epoch_2) == ("node-2", 2)
            # its processes ended with node-1, and the session says so; the next one is numbered after them
            listed = (await http.get(f"{url_2}/v1/sessions/{session}/processes", headers=auth)).json()["processes"]
            assert [(p["id"], p["name"], p["state"]) for p in listed] == [("p1", "sleep", "killed"),
                                                                         ("p2", "true", "exited")]
            assert "ended with node 'node-1'" in listed[0]["error"] and "node-2" in listed[0]["error"]
            assert listed[1].get("error") is None and listed[1]["exit_code"] == 0
            one = await http.get(f"{url_2}/v1/sessions/{session}/processes/p1", headers=auth)
            assert one.status_code == 200 and one.json()["state"] == "killed"
            gone = await http.delete(f"{url_2}/v1/sessions/{session}/processes/p1", headers=auth)
            assert gone.status_code == 404 and "ended with node 'node-1'" in gone.json()["error"]["message"]
            again = await http.post(f"{url_2}/v1/sessions/{session}/processes", headers=auth,
                                    json={"command": ["true"]})
            assert again.status_code == 201 and again.json()["id"] == "p3", again.text
            metrics = _metrics((await http.get(f"{url_2}/metrics")).text)
            assert metrics["wasm_runner_session_takeovers_total"] == 1
            assert metrics["wasm_runner_session_restore_duration_seconds_count"] == 1
            assert metrics["wasm_runner_session_restore_duration_seconds_sum"] > 0
            assert metrics["wasm_runner_forwarded_requests_total"] == 1  # the exec forwarded to node-1 before
            assert _metrics((await http.get(f"{url_3}/metrics")).text)["wasm_runner_forwarded_requests_total"] == 1

            # node-2 is paused in the middle of a call that wrote a file; node-3 takes over meanwhile
            stale_file = nodes[1][0] / "sessions" / session / "files" / "stale.txt"
            stale_call = ("import time\nwith open('stale.txt', 'w') as f:\n    f.write('never acknowledged')\n"
                          "x = -1\ntime.sleep(4)")
            pending = asyncio.create_task(http.post(f"{url_2}/v1/sessions/{session}/exec", headers=auth,
                                                    json={"code": stale_call}))
            deadline = time.monotonic() + WAIT_S
            while not stale_file.exists():
                assert time.monotonic() < deadline and not pending.done()
                await asyncio.sleep(0.02)
            os.kill(proc_2.pid, signal.SIGSTOP)
            try:
                # a request relayed to the paused node waits for it only while its lease runs: then 503
                relayed = await http.get(f"{url_3}/v1/sessions/{session}/files/data.txt", headers=auth,
                                         timeout=WAIT_S / 2)
                assert relayed.status_code == 503, relayed.text
                assert relayed.json()["error"]["code"] == "session_node_unavailable"
                assert "lease ran out" in relayed.json()["error"]["message"] and relayed.headers["Retry-After"] == "1"
                deadline = time.monotonic() + WAIT_S
                while _holder(postgres_url, session)[2] > 0:  # node-2's lease runs out (the database's clock)
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                moved = await _until_served(http, url_3, session,
                                            "import os\nprint(x, os.path.exists('stale.txt'))\ny = 7", auth)
                assert moved.status_code == 200 and moved.json()["stdout"] == "42 False\n", moved.text
            finally:
                os.kill(proc_2.pid, signal.SIGCONT)

            # back, node-2 finishes its call, but cannot store it: the client gets an error, not a 200
            refused = await pending
            assert refused.status_code == 421, refused.text
            assert "node-3" in refused.json()["error"]["message"]
            again = await http.post(f"{url_2}/v1/sessions/{session}/exec", json={"code": "print(x)"}, headers=auth)
            assert again.status_code == 200 and again.json()["stdout"] == "42\n", again.text  # forwarded to node-3
            assert _holder(postgres_url, session)[:2] == ("node-3", epoch_2 + 1)

            final = await http.post(f"{url_3}/v1/sessions/{session}/exec", headers=auth,
                                    json={"code": "import os\nprint(x, y, os.path.exists('stale.txt'))"})
            assert final.status_code == 200 and final.json()["stdout"] == "42 7 False\n", final.text

            # a kernel holding a file open cannot be stored: a takeover says its state is gone, and why
            held = await http.post(f"{url_3}/v1/sessions/{session}/exec", json={"code": "f = open('data.txt')"},
                                   headers=auth)
            assert held.status_code == 200, held.text
            proc_3.kill()
            await proc_3.wait()
            fresh = await _until_served(http, url_2, session, "print('z' in globals())\nz = 1", auth)
            assert fresh.status_code == 200 and fresh.json()["stdout"] == "False\n", fresh.text
            assert fresh.json()["kernel_restarted"] and "moved to this node" in fresh.json()["restart_reason"]
            with_file = await http.get(f"{url_2}/v1/sessions/{session}/files/data.txt", headers=auth)
            assert with_file.content == b"written by a call"  # the files are there all the same


async def test_a_hibernated_or_drained_session_is_let_go_and_wakes_on_any_node_and_expires_unheld(postgres_url, storage,
                                                                                       tmp_path):
    nodes = [node_files(tmp_path, postgres_url, name, storage, "[sessions]\nsweep_interval_s = 0.5\n")
             for name in ("node-1", "node-2")]
    async with contextlib.AsyncExitStack() as stack:
        (_, url_1), (proc_2, url_2) = await asyncio.gather(*(stack.enter_async_context(serving(d, config=c))
                                                             for d, c in nodes))
        auth = admin_auth(postgres_url, nodes[0][0], "team")
        async with httpx.AsyncClient(timeout=120) as http:
            # hibernated on request: stored, its lease ended at once, its copy on node-1 dropped
            session = (await http.post(f"{url_1}/v1/sessions", json={}, headers=auth)).json()["id"]
            ran = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={
                "code": "x = 42\nopen('kept.txt', 'w').write('kept')"})
            assert ran.status_code == 200, ran.text
            for _ in range(16):  # generation 16: the older generations' manifests are collected
                assert (await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth,
                                        json={"code": "n = globals().get('n', 0) + 1"})).status_code == 200
            kept = ObjectStorage(StorageSettings.model_validate(storage))

            async def collected() -> bool:
                manifests = [k for k in kept.objects.keys(f"sessions/{session}/") if "/manifests/" in k]
                return 0 < len(manifests) < 16

            await eventually(collected, timeout=20)
            kept.close()
            # a presigned link signed by node-1 (the cluster's one secret) holds wherever the session goes
            signed = await http.post(f"{url_1}/v1/sessions/{session}/files/kept.txt:presign", headers=auth, json={})
            assert signed.status_code == 200, signed.text
            link = URL(signed.json()["url"]).raw_path
            slept = await http.post(f"{url_1}/v1/sessions/{session}:hibernate", headers=auth)
            assert slept.status_code == 200 and slept.json()["state"] == "hibernated", slept.text
            assert _holder(postgres_url, session)[2] < 0  # no node holds it
            local = nodes[0][0] / "sessions" / session

            async def dropped() -> bool:
                return not local.exists()

            await eventually(dropped, timeout=10)
            # the next request through node-2 wakes it there at once (no lease to wait for), state intact
            woke = await http.post(f"{url_2}/v1/sessions/{session}/exec", headers=auth,
                                   json={"code": "print(x, open('kept.txt').read())"})
            assert woke.status_code == 200 and woke.json()["stdout"] == "42 kept\n", woke.text
            assert woke.json()["kernel_restored"] and not woke.json()["kernel_restarted"]
            assert _holder(postgres_url, session)[:2] == ("node-2", 2)
            # and through node-1 it is forwarded to node-2, a call with a key or a link alike
            again = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={"code": "print(x)"})
            assert again.status_code == 200 and again.json()["stdout"] == "42\n", again.text
            for url in (url_1, url_2):
                followed = await http.get(url + link)
                assert followed.status_code == 200 and followed.content == b"kept", followed.text
            altered = await http.get(url_1 + link.replace("kept.txt", "other.txt"))
            assert altered.status_code == 403, altered.text

            # idle past its timeout, the sweep lets it go too; past its TTL, whichever node sweeps removes it
            brief = (await http.post(f"{url_2}/v1/sessions", json={"idle_timeout_s": 0.5, "ttl_s": 6},
                                     headers=auth)).json()["id"]
            assert (await http.post(f"{url_2}/v1/sessions/{brief}/exec", headers=auth,
                                    json={"code": "y = 1"})).status_code == 200

            def lease_of(session_id: str):
                with psycopg.connect(postgres_url) as conn:
                    return conn.execute("SELECT expires_at FROM leases WHERE session_id = %s",
                                        (session_id,)).fetchone()

            async def let_go() -> bool:
                return lease_of(brief)[0] == 0

            await eventually(let_go, timeout=20)

            async def removed() -> bool:
                return lease_of(brief) is None

            await eventually(removed, timeout=30)
            gone = await http.get(f"{url_1}/v1/sessions/{brief}", headers=auth)
            assert gone.status_code == 404, gone.text
            with psycopg.connect(postgres_url) as conn:
                assert conn.execute("SELECT count(*) FROM sessions WHERE id = %s", (brief,)).fetchone() == (0,)

            # node-2 stops (SIGTERM): it lets its sessions go as it drains, and node-1 wakes them at once
            assert (await http.post(f"{url_2}/v1/sessions/{session}/exec", headers=auth,
                                    json={"code": "z = x + 1"})).status_code == 200
            proc_2.terminate()
            assert await proc_2.wait() == 0
            assert lease_of(session) == (0,)  # let go, not left to run out
            drained = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={"code": "print(z)"})
            assert drained.status_code == 200 and drained.json()["stdout"] == "43\n", drained.text


async def test_checkpoint_durability_stores_after_the_answer_and_states_its_window(postgres_url, s3, tmp_path):
    storage = {**s3.settings(), "durability": "checkpoint", "checkpoint_s": 1}
    nodes = [node_files(tmp_path, postgres_url, name, storage) for name in ("node-1", "node-2")]
    async with contextlib.AsyncExitStack() as stack:
        (proc_1, url_1), (_, url_2) = await asyncio.gather(*(stack.enter_async_context(serving(d, config=c))
                                                             for d, c in nodes))
        auth = admin_auth(postgres_url, nodes[0][0], "team")

        def generation(session_id: str) -> int:
            with psycopg.connect(postgres_url) as conn:
                row = conn.execute("SELECT generation FROM leases WHERE session_id = %s", (session_id,)).fetchone()
            assert row is not None
            return row[0]

        async with httpx.AsyncClient(timeout=120) as http:
            created = await http.post(f"{url_1}/v1/sessions", json={}, headers=auth)
            assert created.json()["durability"] == "checkpoint" and created.json()["durability_window_s"] == 1
            session = created.json()["id"]
            ran = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={"code": "x = 1"})
            assert ran.status_code == 200, ran.text
            assert generation(session) == 0  # answered before it was stored

            async def stored() -> bool:
                return generation(session) > 0

            await eventually(stored, timeout=10)  # the checkpoint, about a second later
            lost = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={"code": "y = 2"})
            assert lost.status_code == 200, lost.text
            proc_1.kill()  # within the window: y was answered, not stored
            await proc_1.wait()
            deadline = time.monotonic() + WAIT_S
            while True:
                taken = await http.post(f"{url_2}/v1/sessions/{session}/exec", headers=auth,
                                        json={"code": "print(x, 'y' in globals())"})
                if taken.status_code != 503:
                    break
                assert time.monotonic() < deadline, taken.text
                await asyncio.sleep(0.1)
            assert taken.status_code == 200 and taken.json()["stdout"] == "1 False\n", taken.text


async def test_a_workspace_disk_quota_counts_what_is_stored_for_sessions_on_other_nodes_or_none(postgres_url, tmp_path):
    shared = {"kind": "posix", "path": str(tmp_path / "shared-mount")}
    nodes = [node_files(tmp_path, postgres_url, name, shared, "[auth.quotas]\ndisk_bytes = 3000000\n")
             for name in ("node-1", "node-2")]
    async with contextlib.AsyncExitStack() as stack:
        (_, url_1), (_, url_2) = await asyncio.gather(*(stack.enter_async_context(serving(d, config=c))
                                                        for d, c in nodes))
        auth = admin_auth(postgres_url, nodes[0][0], "team")
        async with httpx.AsyncClient(timeout=120) as http:
            first = (await http.post(f"{url_1}/v1/sessions", json={}, headers=auth)).json()["id"]
            put = await http.put(f"{url_1}/v1/sessions/{first}/files/big.bin", content=b"x" * 2_000_000, headers=auth)
            assert put.status_code == 201, put.text
            slept = await http.post(f"{url_1}/v1/sessions/{first}:hibernate", headers=auth)
            assert slept.status_code == 200 and slept.json()["state"] == "hibernated", slept.text
            local = nodes[0][0] / "sessions" / first

            async def let_go() -> bool:
                return not local.exists() and _holder(postgres_url, first)[2] < 0

            await eventually(let_go, timeout=10)  # on no node's disk now: only in storage
            second = (await http.post(f"{url_2}/v1/sessions", json={}, headers=auth)).json()["id"]
            for url in (url_1, url_2):  # neither node holds the first session, both count its stored 2 MB
                refused = await http.put(f"{url}/v1/sessions/{second}/files/more.bin", content=b"y" * 1_500_000,
                                         headers=auth)
                assert refused.status_code == 413 and refused.json()["error"]["code"] == "quota_exceeded", refused.text
            small = await http.put(f"{url_2}/v1/sessions/{second}/files/small.bin", content=b"y" * 500_000,
                                   headers=auth)
            assert small.status_code == 201, small.text


async def test_a_node_back_from_a_crash_holds_again_what_no_other_node_took_and_drops_the_rest(postgres_url,
                                                                                             tmp_path):
    shared = {"kind": "posix", "path": str(tmp_path / "shared-mount")}
    (dir_1, config_1), (dir_2, config_2) = (node_files(tmp_path, postgres_url, name, shared)
                                            for name in ("node-1", "node-2"))
    auth = admin_auth(postgres_url, dir_1, "team")
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=120) as http:
        (proc_1, url_1), (_, url_2) = await asyncio.gather(stack.enter_async_context(serving(dir_1, config=config_1)),
                                                           stack.enter_async_context(serving(dir_2, config=config_2)))
        kept, taken = [(await http.post(f"{url_1}/v1/sessions", json={}, headers=auth)).json()["id"] for _ in "ab"]
        for session, value in ((kept, 1), (taken, 2)):
            ran = await http.post(f"{url_1}/v1/sessions/{session}/exec", headers=auth, json={"code": f"x = {value}"})
            assert ran.status_code == 200, ran.text
        proc_1.kill()
        await proc_1.wait()
        moved = await _until_served(http, url_2, taken, "print(x)", auth)  # node-2 takes one over meanwhile
        assert moved.status_code == 200 and moved.json()["stdout"] == "2\n", moved.text
        assert (dir_1 / "sessions" / taken).is_dir()  # node-1's stale copy, left by the crash

        _, url_1 = await stack.enter_async_context(serving(dir_1, config=config_1))
        assert _holder(postgres_url, kept)[:2] == ("node-1", 2)  # claimed again at start: it never moved
        assert not (dir_1 / "sessions" / taken).exists()  # the copy of what moved is gone
        for url in (url_1, url_2):
            for session, value in ((kept, 1), (taken, 2)):
                answer = await http.post(f"{url}/v1/sessions/{session}/exec", headers=auth, json={"code": "print(x)"})
                assert answer.status_code == 200 and answer.json()["stdout"] == f"{value}\n", answer.text
        assert _holder(postgres_url, taken)[0] == "node-2" and _holder(postgres_url, kept)[0] == "node-1"
