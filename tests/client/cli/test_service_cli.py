"""`wasm-runner sessions|exec|files|upload|download|packages|egress` against a real service on 127.0.0.1,
run as the installed command runs them (a subprocess of the `wasm-runner` console)."""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from wasm_runner_client import Client
from wasm_runner_server.security.tenants import TenantStore

LOOPBACK_PORT = "127.0.0.1:8000"
"""What the `net` profile may reach (only the policy is checked here: nothing connects to it)."""
HEAVY = ["wasmtime", "aiohttp", "pydantic", "numpy", "wasm_runner", "wasm_runner_server.app"]


@pytest.fixture
def service(start_server, tmp_path: Path) -> tuple[str, str]:
    data_dir = tmp_path / "data"
    tenants = TenantStore.in_data_dir(data_dir)
    key, _ = tenants.create_key("team", "cli", "member")
    tenants.close()
    profiles = {"net": {"language": "python", "network": {"mode": "allowlist", "allow": [LOOPBACK_PORT]}}}
    server = start_server(data_dir=data_dir, auth={"enabled": True}, profiles=profiles)
    return server.url, key


def cli_env(url: str, key: str) -> dict[str, str]:
    return {**os.environ, "WASM_RUNNER_URL": url, "WASM_RUNNER_API_KEY": key}


def wasm_runner(*args: str, url: str, key: str, cwd: Path | None = None) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "wasm_runner_server.cli.console", *args], capture_output=True,
                          text=True, timeout=120, env=cli_env(url, key), cwd=cwd)
    return done.returncode, done.stdout, done.stderr


def make_tree(root: Path) -> dict[str, bytes]:
    files = {"a.txt": b"alpha\n", "sub/b.py": b"print('b')\n", "sub/deep/data.bin": bytes(range(256)) * 40,
             "sub/deep/50% off.txt": b"percent\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def tree_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_session_gets_a_folder_runs_on_it_with_the_guests_exit_code_and_gives_a_folder_back(service, tmp_path):
    url, key = service
    status, out, err = wasm_runner("sessions", "create", "--json", "--metadata", "task=cli", url=url, key=key)
    assert status == 0, err
    session = json.loads(out)
    sid = session["id"]
    assert session["state"] == "idle" and session["metadata"] == {"task": "cli"}

    local = tmp_path / "project"
    files = make_tree(local)
    (local / "outside").symlink_to("/etc/passwd")  # never followed: skipped with a note
    status, out, err = wasm_runner("upload", sid, str(local), "work", url=url, key=key)
    assert status == 0, err
    assert "uploaded 4 files" in out and "skipped" in err and "outside" in err
    status, out, err = wasm_runner("files", "ls", sid, "work", "-R", "--json", url=url, key=key)
    assert status == 0, err
    listed = {e["path"]: e for e in json.loads(out)["entries"]}
    assert {p for p, e in listed.items() if e["type"] == "file"} == {f"work/{rel}" for rel in files}
    assert listed["work/sub/deep/data.bin"]["size"] == len(files["sub/deep/data.bin"])

    program = ("import os, sys\n"
               "data = open('work/sub/deep/data.bin', 'rb').read()\n"
               "os.makedirs('results/nested', exist_ok=True)\n"
               "open('results/nested/sum.txt', 'w').write(str(sum(data)))\n"
               "open('results/copy.bin', 'wb').write(data[:10])\n"
               "print(open('work/sub/deep/50% off.txt').read(), end='')\n"
               "sys.exit(7)\n")
    status, out, err = wasm_runner("exec", "--session", sid, "-c", program, url=url, key=key)
    assert (status, out) == (7, "percent\n"), err  # the guest's own exit code

    status, out, err = wasm_runner("files", "cat", sid, "results/nested/sum.txt", url=url, key=key)
    assert (status, out) == (0, str(sum(files["sub/deep/data.bin"]))), err
    status, out, err = wasm_runner("download", sid, "results", str(tmp_path / "back"), url=url, key=key)
    assert status == 0, err
    assert tree_of(tmp_path / "back") == {"nested/sum.txt": str(sum(files["sub/deep/data.bin"])).encode(),
                                         "copy.bin": files["sub/deep/data.bin"][:10]}
    status, _, err = wasm_runner("upload", sid, str(local / "a.txt"), "work", url=url, key=key)
    assert status == 65 and "hint: end REMOTE with / to upload into it: work/" in err
    status, out, err = wasm_runner("upload", sid, str(local / "a.txt"), "work/sub/", url=url, key=key)
    assert (status, out) == (0, "uploaded 1 file (6 bytes) to work/sub/a.txt\n"), err
    files["sub/a.txt"] = files["a.txt"]
    status, out, err = wasm_runner("download", sid, "work", str(tmp_path / "round-trip"), url=url, key=key)
    assert status == 0 and tree_of(tmp_path / "round-trip") == files, err
    status, _, err = wasm_runner("download", sid, "work/a.txt", str(tmp_path / "round-trip" / "a.txt"),
                                 url=url, key=key)
    assert status == 74 and "exists; nothing was written" in err  # never replaced without --force

    status, out, err = wasm_runner("sessions", "list", url=url, key=key)
    assert status == 0 and out.splitlines()[0].split()[:3] == ["ID", "PROFILE", "STATE"], err
    assert sid in out
    status, out, err = wasm_runner("sessions", "delete", sid, url=url, key=key)
    assert (status, out) == (0, f"deleted {sid}\n"), err
    status, _, err = wasm_runner("sessions", "show", sid, url=url, key=key)
    assert status == 65 and "(session_not_found)" in err


def test_names_a_guest_chose_cannot_drive_the_terminal(service):
    url, key = service
    with Client(url, api_key=key) as client:
        sid = client.create_session().id
        made = client.exec(sid, "open('x\\x1b]0;owned\\x07\\u202egnp.txt', 'w').write('1')")
        assert made.exit_code == 0, made.stderr
    status, out, err = wasm_runner("files", "ls", sid, url=url, key=key)
    assert status == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "x\\x1b]0;owned\\x07\\u202egnp.txt" in out  # shown escaped, still recognisable
    status, out, err = wasm_runner("files", "ls", sid, "--json", url=url, key=key)
    assert json.loads(out)["entries"][0]["path"] == "x\x1b]0;owned\x07\u202egnp.txt"  # JSON keeps the name exact


def test_exec_streams_output_while_the_program_still_runs(service, tmp_path):
    """The program prints, then waits for a file that the test writes only once it has seen that line:
    without streaming the line would come only after the program ended, which it cannot do first."""
    url, key = service
    with Client(url, api_key=key) as client:
        sid = client.create_session().id
        program = tmp_path / "waits.py"
        program.write_text("import os, time\n"
                           "print('first', flush=True)\n"
                           "for _ in range(400):\n"
                           "    if os.path.exists('go'):\n"
                           "        break\n"
                           "    time.sleep(0.05)\n"
                           "print('second' if os.path.exists('go') else 'gave up')\n")
        running = subprocess.Popen([sys.executable, "-m", "wasm_runner_server.cli.console", "exec", "--session", sid,
                                    "--timeout", "60", str(program)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=cli_env(url, key))
        lines: queue.Queue[str] = queue.Queue()
        stdout = running.stdout
        assert stdout is not None

        def read() -> None:
            for line in stdout:
                lines.put(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert lines.get(timeout=60) == "first\n"
            assert running.poll() is None  # still waiting for 'go'
            client.write_file(sid, "go", "")
            assert running.wait(timeout=60) == 0, running.stderr.read() if running.stderr else ""
        finally:
            running.kill()
            running.wait()
        reader.join(10)
        assert lines.get(timeout=5) == "second\n"


def test_ctrl_c_cancels_the_run_on_the_service(service):
    url, key = service
    with Client(url, api_key=key) as client:
        sid = client.create_session().id
        running = subprocess.Popen([sys.executable, "-m", "wasm_runner_server.cli.console", "exec", "--session", sid,
                                    "--timeout", "300", "-c", "print('started', flush=True)\nwhile True: pass"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(url, key))
        try:
            assert running.stdout is not None and running.stdout.readline() == "started\n"
            assert client.get_session(sid).state == "active"
            running.send_signal(signal.SIGINT)
            assert running.wait(timeout=60) == 130
        finally:
            running.kill()
            running.wait()
        deadline = time.monotonic() + 60  # far less than the run's 300 s: only a cancelled run stops in time
        while client.get_session(sid).state == "active":
            assert time.monotonic() < deadline, "the run went on after the command was interrupted"
            time.sleep(0.1)
        assert client.exec(sid, "print('next')").stdout == "next\n"


def test_limits_json_and_a_bad_key_have_their_own_exit_codes(service, tmp_path):
    url, key = service
    status, out, err = wasm_runner("exec", "--timeout", "1", "-c", "while True: pass", url=url, key=key)
    assert status == 124 and "limit timeout" in err and "limits.timeout_s" in err
    status, _, err = wasm_runner("exec", "--memory-mib", "64", "-c", "x = bytearray(200 * 1024 * 1024)",
                                 url=url, key=key)
    assert status == 125 and "limit memory" in err

    status, out, err = wasm_runner("exec", "--json", "-l", "javascript", "-c", "console.log(6 * 7)", url=url, key=key)
    assert status == 0, err
    result = json.loads(out)
    assert (result["stdout"], result["exit_code"], result["limit"]) == ("42\n", 0, None)
    status, out, err = wasm_runner("exec", "--json", "-c", "import sys; sys.exit(3)", url=url, key=key)
    assert status == 3 and json.loads(out)["exit_code"] == 3
    status, out, err = wasm_runner("exec", "-c", "import socket\nsocket.create_connection(('example.com', 80))",
                                   url=url, key=key)
    assert status == 1 and err.splitlines()[-1].startswith("hint: network access is denied")  # the service's hint

    status, out, err = wasm_runner("sessions", "list", url=url, key="wr_not_a_key")
    assert status == 77 and out == ""
    assert "error: the API key is not valid or has been revoked (invalid_key)" in err
    status, out, err = wasm_runner("exec", "-c", "print(1)", url="http://127.0.0.1:9", key=key)
    assert status == 69 and "cannot reach the service" in err and "--url" in err
    status, _, err = wasm_runner("exec", url=url, key=key)
    assert status == 2 and "give the code with -c CODE" in err


def test_egress_and_packages_of_a_session(service):
    url, key = service
    status, out, err = wasm_runner("sessions", "create", "--profile", "net", "--egress", "deny", url=url, key=key)
    assert status == 0, err
    sid = out.strip()
    status, out, err = wasm_runner("egress", "show", sid, "--json", url=url, key=key)
    assert status == 0 and json.loads(out) == {"mode": "deny", "allow": []}, err
    status, out, err = wasm_runner("egress", "set", sid, "--mode", "allowlist", "--allow", LOOPBACK_PORT,
                                   url=url, key=key)
    assert (status, out) == (0, f"allowlist ({LOOPBACK_PORT})\n"), err
    status, out, err = wasm_runner("sessions", "show", sid, url=url, key=key)
    assert status == 0 and f"egress:       allowlist ({LOOPBACK_PORT})" in out.splitlines(), out
    status, out, err = wasm_runner("egress", "set", sid, "--mode", "open", url=url, key=key)
    assert status == 77 and "(network_not_allowed)" in err  # wider than the profile's: refused by the service
    status, _, err = wasm_runner("egress", "set", sid, "--mode", "allowlist", url=url, key=key)
    assert status == 2 and "at least one --allow" in err
    status, out, err = wasm_runner("egress", "set", sid, "--mode", "deny", url=url, key=key)
    assert (status, out) == (0, "deny\n"), err
    status, out, err = wasm_runner("egress", "reset", sid, url=url, key=key)
    assert (status, out) == (0, f"allowlist ({LOOPBACK_PORT})\n"), err  # the profile's again

    status, out, err = wasm_runner("packages", "list", sid, "--json", url=url, key=key)
    assert status == 0 and json.loads(out).get("python", []) == [], err
    status, out, err = wasm_runner("packages", "install", sid, "not a name!", url=url, key=key)
    assert (status, out) == (65, "")  # a refused install is a result (ok false), still non-zero
    assert "error: not a requirement: 'not a name!'" in err and "(not_found)" in err and "hint:" in err


def test_a_reader_that_stops_early_ends_the_command_quietly(service, tmp_path):
    url, key = service
    command = [sys.executable, "-m", "wasm_runner_server.cli.console", "exec", "-c",
               "for i in range(100000): print(i)"]
    script = f"{shlex.join(command)} 2>{shlex.quote(str(tmp_path / 'err'))} | head -n 2; echo \"${{PIPESTATUS[0]}}\""
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=cli_env(url, key))
    assert done.stdout.splitlines() == ["0", "1", "141"], done.stderr
    assert (tmp_path / "err").read_text() == ""  # no traceback, no error line


@pytest.mark.parametrize("entry", ["wasm_runner_server.cli.console", "wasm_runner_client.cli"])
def test_the_service_commands_import_nothing_of_the_sandbox_or_the_service(entry: str) -> None:
    script = ("import json, sys\n"
              f"from {entry} import main\n"
              "code = main(['sessions', 'list', '--url', 'http://127.0.0.1:9'])\n"
              f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout.splitlines()[-1]) == [69, []]  # refused connection, nothing heavy imported
    assert "cannot reach the service" in done.stderr


def test_fork_and_templates_from_the_command_line(service):
    url, key = service
    code, sid, err = wasm_runner("sessions", "create", url=url, key=key)
    sid = sid.strip()
    assert code == 0, err
    assert wasm_runner("exec", "-s", sid, "-c", "x = 41", url=url, key=key)[0] == 0
    code, out, err = wasm_runner("sessions", "fork", sid, "-n", "2", url=url, key=key)
    children = out.split()
    assert code == 0 and len(children) == 2, err
    code, out, err = wasm_runner("exec", "-s", children[1], "-c", "print(x + 1)", url=url, key=key)
    assert (code, out) == (0, "42\n"), err
    code, out, err = wasm_runner("sessions", "publish", sid, "ready", url=url, key=key)
    assert code == 0 and "published ready" in out and "python" in out, err
    code, out, err = wasm_runner("sessions", "templates", "--json", url=url, key=key)
    assert [t["name"] for t in json.loads(out)] == ["ready"]
    code, started, err = wasm_runner("sessions", "create", "--template", "ready", url=url, key=key)
    assert code == 0, err
    code, out, err = wasm_runner("exec", "-s", started.strip(), "-c", "print(x)", url=url, key=key)
    assert (code, out) == (0, "41\n"), err
    assert wasm_runner("sessions", "unpublish", "ready", url=url, key=key)[0] == 0
    code, _, err = wasm_runner("sessions", "create", "--template", "ready", url=url, key=key)
    assert code != 0 and "template" in err


def test_console_prints_a_link_that_signs_the_browser_in_once_without_the_key(service):
    url, key = service
    status, out, err = wasm_runner("console", url=url, key=key)
    assert status == 0, err
    link = out.strip()
    assert link.startswith(url + "/console/#sign-in=") and key not in link
    token = link.split("#sign-in=", 1)[1]
    first = httpx.post(url + "/v1/console/session", json={"link": token}, headers={"Sec-Fetch-Site": "same-origin"})
    assert first.status_code == 200 and first.json()["workspace"] == "team", first.text
    again = httpx.post(url + "/v1/console/session", json={"link": token}, headers={"Sec-Fetch-Site": "same-origin"})
    assert again.status_code == 401
    status, _, err = wasm_runner("console", url=url, key="wr_000000000000_" + "x" * 24)
    assert status != 0 and ("(invalid_key)" in err or "(unauthorized)" in err), err
