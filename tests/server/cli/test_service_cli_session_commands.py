"""The service commands against the real service in its own process (`wasm-runner serve`), as a user
types them: `sessions create|get|hibernate`, `files put|get`, `exec SESSION` streaming with the guest's
exit status, `templates list`, `--json` that parses, and one clear line (never a traceback) for a
session that does not exist."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from service_process import serving

from wasm_runner_server.security.tenants import TenantStore

MISSING = "no-such-session"


@pytest.fixture
async def service(tmp_path: Path):
    data_dir = tmp_path / "data"
    tenants = TenantStore.in_data_dir(data_dir)
    key, _ = tenants.create_key("team", "cli", "member")
    tenants.close()
    async with serving(data_dir) as (_, url):
        yield url, key


def environment(url: str, key: str) -> dict[str, str]:
    return {**os.environ, "WASM_RUNNER_URL": url, "WASM_RUNNER_API_KEY": key}


async def start(*args: str, url: str, key: str, cwd: Path | None = None,
                stdin: int | None = asyncio.subprocess.DEVNULL) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "wasm_runner_server.cli.console", *args, cwd=cwd, env=environment(url, key),
        stdin=stdin, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def wasm_runner(*args: str, url: str, key: str, cwd: Path | None = None,
                      stdin: bytes | None = None) -> tuple[int, str, str]:
    process = await start(*args, url=url, key=key, cwd=cwd,
                          stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(stdin), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def make_tree(root: Path) -> dict[str, bytes]:
    files = {"readme.md": b"# project\n", "src/main.py": b"print('main')\n",
             "src/data/numbers.bin": bytes(range(256)) * 16, "src/data/empty.txt": b"",
             "docs/a b/c.txt": b"spaces\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def tree_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


WAITS_FOR_GO = """\
import os, time
total = sum(open('project/src/data/numbers.bin', 'rb').read())
os.makedirs('project/results', exist_ok=True)
open('project/results/total.txt', 'w').write(str(total))
kept = total
print('first', flush=True)
for _ in range(600):
    if os.path.exists('go'):
        break
    time.sleep(0.05)
print('second' if os.path.exists('go') else 'gave up')
"""
"""Prints a line, then waits for a file the test writes only once it has read that line: without
streaming the line would arrive only after the program ended, which it cannot do first."""


async def test_a_session_takes_a_folder_streams_a_run_and_gives_the_folder_back(service, tmp_path: Path) -> None:
    url, key = service
    status, out, err = await wasm_runner("sessions", "create", "--json", url=url, key=key)
    assert status == 0, err
    sid = json.loads(out)["id"]

    local = tmp_path / "project"
    files = make_tree(local)
    status, out, err = await wasm_runner("files", "put", sid, str(local), url=url, key=key)
    assert (status, out) == (0, f"uploaded {len(files)} files ({sum(map(len, files.values()))} bytes) to project\n"), err

    running = await start("exec", sid, "--timeout", "120", "-c", WAITS_FOR_GO, url=url, key=key)
    assert running.stdout is not None and running.stderr is not None
    try:
        first = await asyncio.wait_for(running.stdout.readline(), 120)
        assert first == b"first\n"
        assert running.returncode is None  # the program is still waiting for 'go'
        (tmp_path / "go").write_text("")
        status, _, err = await wasm_runner("files", "put", sid, str(tmp_path / "go"), url=url, key=key)
        assert status == 0, err
        rest, errors = await asyncio.wait_for(running.communicate(), 120)
    finally:
        if running.returncode is None:
            running.kill()
            await running.wait()
    assert (running.returncode, rest, errors) == (0, b"second\n", b"")

    (tmp_path / "exits.py").write_text("import sys\nprint(kept)\nsys.exit(3)\n")
    status, out, err = await wasm_runner("exec", sid, str(tmp_path / "exits.py"), url=url, key=key)
    assert (status, out) == (3, f"{sum(files['src/data/numbers.bin'])}\n"), err  # the guest's own exit status
    status, out, err = await wasm_runner("exec", sid, "--timeout", "1", "-c", "while True: pass", url=url, key=key)
    assert status == 124 and err.startswith("error: limit timeout")  # a limit has a status of its own

    status, _, err = await wasm_runner("files", "get", sid, "project", str(tmp_path / "back"), url=url, key=key)
    assert status == 0, err
    expected = {**files, "results/total.txt": str(sum(files["src/data/numbers.bin"])).encode()}
    assert tree_of(tmp_path / "back") == expected

    status, out, err = await wasm_runner("sessions", "hibernate", sid, url=url, key=key)
    assert (status, out) == (0, f"{sid}: hibernated\n"), err
    status, out, err = await wasm_runner("sessions", "get", sid, "--json", url=url, key=key)
    assert status == 0, err
    info = json.loads(out)
    assert (info["id"], info["state"], info["kernels"]) == (sid, "hibernated", [])
    status, out, err = await wasm_runner("exec", sid, "-", url=url, key=key, stdin=b"kept")
    assert (status, out) == (0, f"{sum(files['src/data/numbers.bin'])}\n"), err  # restored from the saved kernel

    status, out, err = await wasm_runner("templates", "list", "--json", url=url, key=key)
    assert (status, json.loads(out)) == (0, []), err
    status, out, err = await wasm_runner("egress", "get", sid, "--json", url=url, key=key)
    assert status == 0 and json.loads(out)["mode"] in ("deny", "allowlist", "open"), err


@pytest.mark.parametrize("session", [MISSING, "../etc"])
async def test_a_session_that_does_not_exist_is_one_clear_line_and_a_nonzero_status(service, tmp_path: Path,
                                                                                    session: str) -> None:
    url, key = service
    here = tmp_path / "here"
    here.mkdir()
    (here / "local.txt").write_text("x")
    commands = [("sessions", "get", session), ("sessions", "hibernate", session), ("exec", session, "-c", "print(1)"),
                ("files", "ls", session), ("files", "put", session, str(here / "local.txt")),
                ("files", "get", session, "a.txt", str(here / "a.txt")), ("files", "get", session, "folder"),
                ("egress", "get", session), ("packages", "list", session), ("sessions", "delete", session)]
    for command in commands:
        status, out, err = await wasm_runner(*command, url=url, key=key, cwd=here)
        assert status == 65 and out == "", (command, status, err)
        assert err.startswith("error: ") and "Traceback" not in err, (command, err)
        assert "(session_not_found)" in err or "(invalid_session_id)" in err, (command, err)
        if "(session_not_found)" in err:
            assert err.endswith("hint: see your sessions with `wasm-runner sessions list`; "
                                "create one with `wasm-runner sessions create`\n"), (command, err)
    assert sorted(p.name for p in here.iterdir()) == ["local.txt"]  # nothing written locally


async def test_a_name_alone_is_a_one_shot_programs_file_and_a_session_needs_its_code(service, tmp_path: Path) -> None:
    url, key = service
    (tmp_path / "once.py").write_text("print('once')")
    status, out, err = await wasm_runner("exec", "once.py", url=url, key=key, cwd=tmp_path)
    assert (status, out) == (0, "once\n"), err  # no session: a one-shot run of the file
    status, out, err = await wasm_runner("exec", "my-session", url=url, key=key, cwd=tmp_path)
    assert (status, out) == (74, "")
    assert err.startswith("error: no file 'my-session' to run\nhint: if my-session is a session, give the code")
    status, out, err = await wasm_runner("exec", "one", "--session", "two", "-c", "1", url=url, key=key)
    assert (status, out) == (2, "") and "two sessions" in err
