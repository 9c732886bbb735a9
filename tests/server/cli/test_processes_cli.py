"""`wasm-runner processes` against a served app: start, list, logs (read back and followed), stop,
a preview link; errors as one line with the service's hint; nothing of the sandbox imported."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from host_processes import host_processes_running

from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_server.security.tenants import TenantStore

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = [pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")]
HEAVY = ["wasmtime", "aiohttp", "pydantic", "numpy", "wasm_runner", "wasm_runner_server.app"]
COUNTER = "echo ready\nfor i in 0 1 2; do sleep 0.2; echo $i; done\n"


@pytest.fixture
async def service(serve, tmp_path: Path) -> tuple[str, str]:
    data_dir = tmp_path / "data"
    tenants = TenantStore.in_data_dir(data_dir)
    key, _ = tenants.create_key("team", "cli", "member")
    tenants.close()
    client = await serve(data_dir, auth={"enabled": True}, workers={"kernel_workers": 0},
                         processes={"stop_grace_s": 0.5})
    return str(client.make_url("")).rstrip("/"), key


async def wasm_runner(*args: str, url: str, key: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "wasm_runner_server.cli.console", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "WASM_RUNNER_URL": url, "WASM_RUNNER_API_KEY": key})
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def new_session(url: str, key: str) -> str:
    import httpx

    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
        response = await http.post("/v1/sessions", json={})
        assert response.status_code == 201, response.text
        return response.json()["id"]


async def test_start_follow_list_and_stop_a_sessions_processes(service) -> None:
    url, key = service
    sid = await new_session(url, key)
    status, out, err = await wasm_runner("processes", "start", "--name", "counter", "--code", COUNTER, sid,
                                         url=url, key=key)
    assert status == 0, err
    counter = out.strip()
    assert counter.startswith("p")
    status, out, err = await wasm_runner("processes", "logs", sid, counter, "--follow", url=url, key=key)
    assert (status, out) == (0, "ready\n0\n1\n2\n"), err  # followed to its end: its exit code
    assert "exited, exit code 0" in err
    status, out, _ = await wasm_runner("processes", "logs", sid, counter, "--offset", "6", url=url, key=key)
    assert (status, out) == (0, "0\n1\n2\n")  # read back from an offset, after the end

    marker = "4321.5625"
    status, out, err = await wasm_runner("processes", "start", "--json", sid, "--", "sleep", marker, url=url, key=key)
    assert status == 0, err
    sleeper = json.loads(out)
    assert sleeper["argv"] == ["sleep", marker] and sleeper["state"] in ("starting", "running")
    status, out, err = await wasm_runner("processes", "list", sid, url=url, key=key)
    assert status == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows[counter][1:3] == ["exited", "0"] and rows[sleeper["id"]][1] == "running"
    assert "1 live" in err
    status, out, err = await wasm_runner("processes", "stop", sid, sleeper["id"], "--json", url=url, key=key)
    assert status == 0 and json.loads(out)["state"] == "killed", err
    assert host_processes_running(["sleep", marker]) == []


async def test_a_preview_link_and_errors_with_the_services_hint(service) -> None:
    url, key = service
    sid = await new_session(url, key)
    status, out, err = await wasm_runner("processes", "url", sid, "8000", "--expires-in", "60", url=url, key=key)
    assert status == 0, err
    assert out.strip().startswith("http://8000-") and ".localhost:" in out and out.strip().endswith("/")
    status, out, err = await wasm_runner("processes", "logs", sid, "p9", url=url, key=key)
    assert status == 65 and out == ""  # refused by the service
    assert "(process_not_found)" in err and "hint: list them with GET" in err
    status, _, err = await wasm_runner("processes", "list", sid, url=url, key="wr_not_a_key")
    assert status == 77 and "(invalid_key)" in err
    status, _, err = await wasm_runner("processes", "start", sid, url=url, key=key)
    assert status == 2 and "give a command after `--`" in err
    status, _, err = await wasm_runner("processes", "start", sid, "--name", "x", url=url, key=key)
    assert status == 2 and "options go before SESSION" in err


def test_the_processes_commands_import_nothing_of_the_sandbox_or_the_service() -> None:
    import subprocess

    script = ("import json, sys\n"
              "from wasm_runner_server.cli.console import main\n"
              "code = main(['processes', 'list', 'any', '--url', 'http://127.0.0.1:9'])\n"
              f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout.splitlines()[-1]) == [69, []]  # refused connection: exit 69, nothing heavy
    assert "cannot reach the service" in done.stderr
