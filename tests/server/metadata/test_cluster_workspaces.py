"""Two service processes on one PostgreSQL, storing sessions in a directory they share (NFS's stand-in):
a workspace's shared/ directory and a member's disk are on that mount, so a member's sessions on either
node see the same disk, and every member the same shared/, as on one node."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import psycopg
from cluster_nodes import node_files
from server_helpers import eventually
from service_process import serving

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.security import stores

LAYOUT = '[auth.disk_layout]\nmembers = "member-disk"\n'


def _holder(url: str, session: str) -> tuple[str, float]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT node, expires_at - extract(epoch from clock_timestamp()) FROM leases "
                           "WHERE session_id = %s", (session,)).fetchone()
    assert row is not None
    return row[0], row[1]


async def _run(http: httpx.AsyncClient, url: str, auth, session: str, code: str) -> str:
    answer = await http.post(f"{url}/v1/sessions/{session}/exec", json={"code": code}, headers=auth)
    assert answer.status_code == 200 and answer.json()["exit_code"] == 0, answer.text
    return answer.json()["stdout"]


async def test_a_members_disk_and_shared_are_the_same_on_every_node(postgres_url, tmp_path):
    mount = tmp_path / "shared-mount"
    nodes = [node_files(tmp_path, postgres_url, name, {"kind": "posix", "path": str(mount)}, LAYOUT)
             for name in ("node-1", "node-2")]
    config = ServiceConfig.model_validate({"server": {"data_dir": str(nodes[0][0])}, "store": {"url": postgres_url}})
    tenants = stores.tenant_store(config, nodes[0][0])
    keys = {name: {"Authorization": f"Bearer {tenants.create_key('team', name, 'member', member)[0]}"}
            for name, member in (("alice", "alice"), ("bob", "bob"))}
    tenants.close()
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=120) as http:
        (_, url_1), (_, url_2) = await asyncio.gather(*(stack.enter_async_context(serving(d, config=c))
                                                        for d, c in nodes))

        async def session(url: str, who: str, agent: str) -> str:
            made = await http.post(f"{url}/v1/sessions", json={"agent": agent}, headers=keys[who])
            assert made.status_code == 201, made.text
            return made.json()["id"]

        on_1, on_2 = await session(url_1, "alice", "analyst"), await session(url_2, "alice", "writer")
        bob_on_2 = await session(url_2, "bob", "analyst")
        await _run(http, url_1, keys["alice"], on_1, "open('/workspace/notes.txt', 'w').write('from node-1')\n"
                                                     "open('/workspace/shared/team.txt', 'w').write('for all')")
        read = "import os\nfor p in ('/workspace/notes.txt', '/workspace/shared/team.txt'):\n" \
               "    print(open(p).read() if os.path.exists(p) else 'absent')"
        assert await _run(http, url_2, keys["alice"], on_2, read) == "from node-1\nfor all\n"  # her disk, node 2
        assert await _run(http, url_2, keys["bob"], bob_on_2, read) == "absent\nfor all\n"  # his own disk
        read_back = await http.get(f"{url_2}/v1/sessions/{on_2}/files/notes.txt", headers=keys["alice"])
        assert read_back.status_code == 200 and read_back.content == b"from node-1"  # the file API sees it too

        # a session on her disk moves like any other: hibernated on node 1, it wakes on node 2, kernel and all
        info = (await http.get(f"{url_1}/v1/sessions/{on_1}", headers=keys["alice"])).json()
        assert info["durability"] == "call", info
        await _run(http, url_1, keys["alice"], on_1, "x = 42")
        slept = await http.post(f"{url_1}/v1/sessions/{on_1}:hibernate", headers=keys["alice"])
        assert slept.status_code == 200 and slept.json()["state"] == "hibernated", slept.text

        async def let_go() -> bool:
            return _holder(postgres_url, on_1)[1] < 0

        await eventually(let_go, timeout=10)
        woke = await _run(http, url_2, keys["alice"], on_1, "import os\nprint(x, os.getcwd(), open('../../notes.txt').read())")
        assert woke == f"42 /workspace/analyst/{on_1} from node-1\n"
        assert _holder(postgres_url, on_1)[0] == "node-2"
    assert (mount / "workspaces" / "team" / "members" / "alice" / "notes.txt").read_text() == "from node-1"
    assert not (nodes[0][0] / "workspaces" / "team" / "members").exists()  # nothing of it on a node's own disk
