"""The client's background processes and preview ports, against a real server with keys (native sandboxes)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from host_processes import host_processes_running
from preview_hosts import on_loopback

from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_client import AsyncClient, AuthenticationError, Client, ConflictError, ProcessInfo
from wasm_runner_server.security.tenants import TenantStore

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = [
    pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="preview ports enter the sandbox's network namespace (root service)"),
]

SECTIONS = {"workers": {"kernel_workers": 0}, "processes": {"max_live": 4, "stop_grace_s": 0.5},
            "auth": {"enabled": True}}
READER = "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\nprint('bye', flush=True)\n"


@pytest.fixture
def keyed(start_server, tmp_path: Path):
    data_dir = tmp_path / "keyed"
    data_dir.mkdir()
    tenants = TenantStore.in_data_dir(data_dir)
    key, _ = tenants.create_key("team-a", "a", "member")
    tenants.close()
    return start_server(data_dir=data_dir, **SECTIONS), key


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def test_output_read_back_by_offset_input_echoed_and_followed_to_the_exit(keyed) -> None:
    server, key = keyed
    with Client(server.url, api_key=key) as client:
        sid = client.create_session().id
        info = client.start_process(sid, code=READER, language="python", name="reader")
        assert isinstance(info, ProcessInfo) and info.id.startswith("p") and info.name == "reader"
        assert client.send_input(sid, info.id, "one\n").written == 4
        first = client.process_output(sid, info.id, wait_s=10)
        assert first.offset == 0 and first.data == "got one\n" and first.next_offset == 8
        assert client.send_input(sid, info.id, b"two\n").written == 4  # bytes go as base64
        wait_for(lambda: client.get_process(sid, info.id).stdout_bytes >= 16)
        again = client.process_output(sid, info.id, offset=first.next_offset)  # a reader that reconnects
        assert again.offset == 8 and again.data == "got two\n"
        part = client.process_output(sid, info.id, offset=4, limit=3)
        assert (part.offset, part.data, part.next_offset) == (4, "one", 7)
        with client.process_output_stream(sid, info.id, offset=again.next_offset) as output:
            client.send_input(sid, info.id, "three\n", eof=True)
            text = "".join(chunk.data for chunk in output)
        assert text == "got three\nbye\n"  # nothing before the offset, nothing repeated
        assert output.exit is not None and output.exit.state == "exited" and output.exit.exit_code == 0
        assert output.next_offset == 8 + 8 + len(text)
        with pytest.raises(ConflictError) as late:
            client.send_input(sid, info.id, "late\n")
        assert late.value.code == "process_not_running"
        listing = client.list_processes(sid)
        assert [p.id for p in listing.processes] == [info.id] and listing.live == 0 and listing.max_live == 4


def test_stop_kills_the_process_tree_and_signals_end_a_process(keyed) -> None:
    server, key = keyed
    marker = "4321.25"
    with Client(server.url, api_key=key) as client:
        sid = client.create_session().id
        tree = client.start_process(sid, ["bash", "-c", f"sleep {marker} & sleep {marker}"])
        assert wait_for(lambda: len(host_processes_running(["sleep", marker])) == 2)
        stopped = client.stop_process(sid, tree.id)
        assert stopped.state == "killed"
        assert wait_for(lambda: host_processes_running(["sleep", marker]) == [], timeout=5)
        single = client.start_process(sid, ["sleep", marker])
        assert wait_for(lambda: len(host_processes_running(["sleep", marker])) == 1)
        client.signal_process(sid, single.id, "TERM")
        ended = wait_for(lambda: (p := client.get_process(sid, single.id)).state not in ("starting", "running") and p)
        assert ended and ended.exit_code == 128 + 15 and ended.signal == "TERM"
        assert host_processes_running(["sleep", marker]) == []


def test_a_preview_link_fetches_the_dev_servers_page_without_a_key(keyed) -> None:
    server, key = keyed
    with Client(server.url, api_key=key) as client:
        sid = client.create_session().id
        client.write_file(sid, "site/index.html", "<h1>preview</h1>")
        info = client.start_process(sid, ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], cwd="site")
        assert wait_for(lambda: 8000 in client.get_process(sid, info.id).ports)
        link = client.preview_url(sid, 8000, expires_in=60)
        # an origin of its own, never the API's
        assert link.port == 8000 and link.url.startswith("http://8000-") and link.url.endswith(".localhost:" + str(
            httpx.URL(link.url).port) + "/") and not link.url.startswith(server.url)
        assert 0 < link.expires_in <= 61  # expiry in whole seconds
        url = client.port_url(sid, 8000, "index.html")
        assert url == f"{server.url}/v1/sessions/{sid}/ports/8000/index.html"
        keyed = httpx.get(url, headers={"Authorization": f"Bearer {key}"})  # the API redirects to the preview
        assert keyed.status_code == 307 and keyed.headers["Location"].startswith("http://8000-")
        assert keyed.headers["Location"].endswith("/index.html") and "<h1>" not in keyed.text
    page_url, host = on_loopback(link.url + "index.html")
    page = httpx.get(page_url, headers=host)  # a browser tab: no key
    assert page.status_code == 200 and page.text == "<h1>preview</h1>"
    assert httpx.get(url).status_code == 401  # the port route itself needs the key
    with Client(server.url, api_key="") as anonymous, pytest.raises(AuthenticationError):
        anonymous.preview_url(sid, 8000)


async def test_the_async_client_starts_follows_and_signals(keyed) -> None:
    server, key = keyed
    async with AsyncClient(server.url, api_key=key) as client:
        sid = (await client.create_session()).id
        counter = await client.start_process(sid, code="for i in range(3):\n    print(i, flush=True)\n",
                                             language="python")
        async with client.process_output_stream(sid, counter.id) as output:
            text = "".join([chunk.data async for chunk in output])
        assert text == "0\n1\n2\n" and output.exit is not None and output.exit.exit_code == 0
        reader = await client.start_process(sid, code=READER, language="python")
        assert (await client.send_input(sid, reader.id, "x\n", eof=True)).written == 2
        out = await client.process_output(sid, reader.id, wait_s=10)
        assert out.data.startswith("got x\n")
        sleeper = await client.start_process(sid, ["sleep", "4321.5"])
        assert (await client.signal_process(sid, sleeper.id, "KILL")).id == sleeper.id
        stopped = await client.stop_process(sid, sleeper.id)
        assert stopped.state == "killed" and stopped.exit_code == 128 + 9
        ids = {p.id for p in (await client.list_processes(sid)).processes}
        assert ids == {counter.id, reader.id, sleeper.id}
        link = await client.preview_url(sid, 8123)
        assert link.url.startswith("http://8123-")
    preview_url, host = on_loopback(link.url)
    status = httpx.get(preview_url, headers=host).status_code
    assert status == 502  # nothing listens there: the link says so, it starts nothing
