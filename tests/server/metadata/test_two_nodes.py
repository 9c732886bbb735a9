"""Two service processes on one PostgreSQL: keys, sessions and the audit log are the cluster's, a session's
kernel stays on the node that created it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
import httpx
import psycopg
import pytest
from process_calls import DEVSERVER
from serve_in_loop import free_port
from server_helpers import eventually
from service_process import serving
from yarl import URL

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.http.preview_server import SANDBOX_CSP
from wasm_runner_server.metadata import migrations
from wasm_runner_server.security import stores


def _node(tmp_path: Path, url: str, name: str, previews_port: int = 0) -> tuple[Path, Path]:
    data_dir = tmp_path / name
    config = tmp_path / f"{name}.toml"
    config.write_text(f'[store]\nurl = "{url}"\nnode = "{name}"\n[server]\nprepare_on_start = false\n'
                      f'[previews]\nport = {previews_port}\n')
    return data_dir, config


async def test_two_nodes_share_keys_sessions_and_the_audit_log(postgres_url, tmp_path):
    previews_b = free_port()
    (dir_a, config_a), (dir_b, config_b) = (_node(tmp_path, postgres_url, "node-a"),
                                            _node(tmp_path, postgres_url, "node-b", previews_b))
    async with contextlib.AsyncExitStack() as stack:
        (_, url_a), (_, url_b) = await asyncio.gather(  # started together: each migrates, the schema once
            stack.enter_async_context(serving(dir_a, config=config_a)),
            stack.enter_async_context(serving(dir_b, config=config_b)))
        with psycopg.connect(postgres_url) as conn:
            versions = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        assert versions == [(n,) for n in range(1, len(migrations.STEPS) + 1)]

        config = ServiceConfig.model_validate({"server": {"data_dir": str(dir_a)}, "store": {"url": postgres_url}})
        tenants = stores.tenant_store(config, dir_a)  # the admin CLI's way: straight into the shared database
        admin, _ = tenants.create_key("ops", "root", "admin")
        tenants.close()

        async with httpx.AsyncClient(timeout=120) as http:
            def auth(key: str) -> dict[str, str]:
                return {"Authorization": f"Bearer {key}"}

            made = await http.post(f"{url_a}/v1/admin/keys", json={"workspace": "team", "name": "dev"},
                                   headers=auth(admin))
            assert made.status_code == 201, made.text
            team = made.json()["key"]
            rival = (await http.post(f"{url_a}/v1/admin/keys", json={"workspace": "rival", "name": "x"},
                                     headers=auth(admin))).json()["key"]

            # a key created through node A authenticates on node B
            assert (await http.get(f"{url_b}/v1/sessions", headers=auth(team))).json()["sessions"] == []

            # a role set through node A counts on node B from the member's next request
            mo = (await http.post(f"{url_a}/v1/admin/keys", json={"workspace": "team", "name": "mo", "member": "mo"},
                                  headers=auth(admin))).json()["key"]
            assert (await http.get(f"{url_b}/v1/admin/members", headers=auth(mo))).status_code == 403
            promoted = await http.put(f"{url_a}/v1/admin/members/mo", params={"workspace": "team"},
                                      json={"role": "admin"}, headers=auth(admin))
            assert promoted.status_code == 200, promoted.text
            members = await http.get(f"{url_b}/v1/admin/members", headers=auth(mo))
            assert members.status_code == 200 and members.json()["members"] == [
                {**members.json()["members"][0], "member": "mo", "role": "admin"}]

            created = await http.post(f"{url_a}/v1/sessions", json={}, headers=auth(team))
            assert created.status_code == 201, created.text
            session = created.json()["id"]
            ran = await http.post(f"{url_a}/v1/sessions/{session}/exec", json={"code": "x = 41\nprint(x + 1)"},
                                  headers=auth(team))
            assert ran.status_code == 200 and ran.json()["stdout"] == "42\n", ran.text

            # node B lists it; its kernel stays on A, and B forwards its calls there (SSE streams too)
            listed = (await http.get(f"{url_b}/v1/sessions", headers=auth(team))).json()["sessions"]
            assert [s["id"] for s in listed] == [session]
            elsewhere = await http.post(f"{url_b}/v1/sessions/{session}/exec", json={"code": "print(x)"},
                                        headers=auth(team))
            assert elsewhere.status_code == 200 and elsewhere.json()["stdout"] == "41\n", elsewhere.text
            put = await http.put(f"{url_b}/v1/sessions/{session}/files/from-b.txt", content=b"through node B",
                                 headers=auth(team))
            assert put.status_code == 201, put.text
            assert (dir_a / "sessions" / session / "files" / "from-b.txt").read_bytes() == b"through node B"
            got = await http.get(f"{url_b}/v1/sessions/{session}/files/from-b.txt", headers=auth(team))
            assert got.status_code == 200 and got.content == b"through node B"
            async with http.stream("POST", f"{url_b}/v1/sessions/{session}/exec", json={
                    "code": "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)"},
                    headers={**auth(team), "Accept": "text/event-stream"}) as streamed:
                assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
                events = [line async for line in streamed.aiter_lines() if line.startswith("event:")]
            assert events.count("event: stdout") >= 2 and events[-1] == "event: result", events
            # a terminal (a WebSocket) through node B is a bridge to node A's sandbox
            async with aiohttp.ClientSession() as client, client.ws_connect(
                    f"{url_b}/v1/sessions/{session}/pty", headers=auth(team),
                    params=[("command", "sh"), ("command", "-c"), ("command", "echo through-b-$((6*7))")]) as ws:
                seen = b""
                while b"through-b-42" not in seen:
                    message = await ws.receive(timeout=30)
                    assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), (message, seen)
                    if message.type == aiohttp.WSMsgType.BINARY:
                        seen += message.data
            # a preview address node A gave out opens through node B's preview listener too (A serves it)
            assert (await http.put(f"{url_b}/v1/sessions/{session}/files/devserver.py", content=DEVSERVER,
                                   headers=auth(team))).status_code in (200, 201)
            dev = await http.post(f"{url_b}/v1/sessions/{session}/processes", headers=auth(team),
                                  json={"command": ["python3", "devserver.py", "8080"], "name": "dev"})
            assert dev.status_code == 201, dev.text

            async def dev_listens() -> bool:
                info = (await http.get(f"{url_b}/v1/sessions/{session}/processes/{dev.json()['id']}",
                                       headers=auth(team))).json()
                return 8080 in info.get("ports", [])

            await eventually(dev_listens, timeout=20)
            link = await http.post(f"{url_b}/v1/sessions/{session}/ports/8080:presign", headers=auth(team), json={})
            assert link.status_code == 200, link.text
            host = URL(link.json()["url"]).host
            for listener in (URL(link.json()["url"]).port, previews_b):
                page = await http.get(f"http://127.0.0.1:{listener}/through?x=1",
                                      headers={"Host": f"{host}:{listener}"})
                assert page.status_code == 200 and page.text.startswith("hello from the sandbox; auth=None; "
                                                                        "path=/through?x=1"), page.text
                assert page.headers.get_list("Content-Security-Policy") == [SANDBOX_CSP]  # sandboxed once
                # a preview page at the console's path is the session's: the console's own policy stays off
                page = await http.get(f"http://127.0.0.1:{listener}/console/", headers={"Host": f"{host}:{listener}"})
                assert page.status_code == 200 and page.headers.get_list("Content-Security-Policy") == [SANDBOX_CSP]
            async with aiohttp.ClientSession() as client, client.ws_connect(
                    f"http://127.0.0.1:{previews_b}/ws", headers={"Host": f"{host}:{previews_b}"}) as ws:
                await ws.send_str("ping")
                assert (await ws.receive(timeout=10)).data == "echo: ping"
            unknown = await http.get(f"http://127.0.0.1:{previews_b}/", headers={"Host": f"8080-{'a' * 26}.localhost"})
            assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "preview_not_found"
            # another workspace's terminal through node B: node A's 404, told again
            async with aiohttp.ClientSession() as client:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.ws_connect(f"{url_b}/v1/sessions/{session}/pty", headers=auth(rival),
                                            params=[("command", "true")])
            assert refused.value.status == 404
            # a request another node forwarded already is served where it lands, never forwarded again
            relayed = await http.post(f"{url_b}/v1/sessions/{session}/exec", json={"code": "print(x)"},
                                      headers={**auth(team), "X-Wasm-Runner-Forwarded-By": "node-c"})
            assert relayed.status_code == 421 and relayed.json()["error"]["code"] == "session_on_other_node"
            # a node that never said where it is reached: the others answer 421 naming it
            with psycopg.connect(postgres_url) as conn:
                conn.execute("DELETE FROM nodes WHERE node = 'node-a'")
            other = (await http.post(f"{url_a}/v1/sessions", json={}, headers=auth(team))).json()["id"]
            unnamed = await http.post(f"{url_b}/v1/sessions/{other}/exec", json={"code": "1"}, headers=auth(team))
            assert unnamed.status_code == 421, unnamed.text
            error = unnamed.json()["error"]
            assert error["code"] == "session_on_other_node" and "node-a" in error["message"]
            with psycopg.connect(postgres_url) as conn:
                conn.execute("INSERT INTO nodes (node, url, seen_at) VALUES ('node-a', %s, 0)", (url_a,))
            # another workspace learns nothing on either node
            for url in (url_a, url_b):
                hidden = await http.post(f"{url}/v1/sessions/{session}/exec", json={"code": "1"}, headers=auth(rival))
                assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "session_not_found"
                assert (await http.get(f"{url}/v1/sessions", headers=auth(rival))).json()["sessions"] == []

            oneshot = await http.post(f"{url_b}/v1/exec", json={"code": "print('from b')"}, headers=auth(team))
            assert oneshot.status_code == 200, oneshot.text

            # both nodes' rows in one log, read through either node (another node's rows are there once its
            # writer committed them: a batch, tens of milliseconds, after they were acknowledged)
            for url in (url_a, url_b):
                modes: list[str] = []
                for _ in range(100):
                    entries = (await http.get(f"{url}/v1/audit", params={"kind": "exec"},
                                              headers=auth(team))).json()["entries"]
                    modes = sorted(e["mode"] for e in entries)
                    if len(modes) >= 4:
                        break
                    await asyncio.sleep(0.05)
                assert modes == ["oneshot", "session", "session", "session"]
            with psycopg.connect(postgres_url) as conn:
                nodes = conn.execute("SELECT node, mode FROM audit WHERE kind = 'exec' ORDER BY node").fetchall()
            # each forwarded call is audited once, by the node that ran it
            assert nodes == [("node-a", "session")] * 3 + [("node-b", "oneshot")]

            # a node that starts (and stops) leaves another node's temporary sessions alone; a temporary
            # session is in its node's memory only, so the shared database does not name it to others
            ephemeral = await http.post(f"{url_a}/v1/sessions", json={"temporary": True}, headers=auth(team))
            assert ephemeral.status_code == 201, ephemeral.text
            dir_c, config_c = _node(tmp_path, postgres_url, "node-c")
            async with serving(dir_c, config=config_c) as (_, url_c):
                listed = (await http.get(f"{url_c}/v1/sessions", headers=auth(team))).json()["sessions"]
                assert {s["id"] for s in listed} == {session, other}
            kept = await http.post(f"{url_a}/v1/sessions/{ephemeral.json()['id']}/exec", json={"code": "print(2)"},
                                   headers=auth(team))
            assert kept.status_code == 200, kept.text

            # the console: a sign-in link asked through node A opens through node B, once; the browser's
            # cookie then works through either node, and a sign-out through one ends it on the other
            asked = await http.post(f"{url_a}/v1/console/sign-in-links", headers=auth(team))
            assert asked.status_code == 201, asked.text
            token = asked.json()["url"].split("#sign-in=", 1)[1]
            signed_in = await http.post(f"{url_b}/v1/console/session", json={"link": token})
            assert signed_in.status_code == 200, signed_in.text
            assert (await http.post(f"{url_a}/v1/console/session", json={"link": token})).status_code == 401
            cookie = {"Cookie": f"wr_console={signed_in.cookies['wr_console']}",
                      "X-CSRF-Token": signed_in.json()["csrf_token"]}
            for url in (url_a, url_b):
                seen = await http.get(f"{url}/v1/sessions", headers=cookie)
                assert seen.status_code == 200 and {s["id"] for s in seen.json()["sessions"]} >= {session}
            assert (await http.delete(f"{url_b}/v1/console/session", headers=cookie)).status_code == 204

            async def signed_out_on_a() -> bool:
                return (await http.get(f"{url_a}/v1/sessions", headers=cookie)).status_code == 401

            await eventually(signed_out_on_a, timeout=10)
            # revoked through node B, refused at once on node A
            prefix = team.split("_")[1]
            revoked = await http.delete(f"{url_b}/v1/admin/keys/wr_{prefix}", headers=auth(admin))
            assert revoked.status_code in (200, 204), revoked.text
            assert (await http.get(f"{url_a}/v1/sessions", headers=auth(team))).status_code == 401
