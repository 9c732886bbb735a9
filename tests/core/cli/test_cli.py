"""The `wasm-runner` command line: run, --json, exit status, workspace, batch."""

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "wasm_runner.cli"]


def cli(*args, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def prepared(runner):
    """The session runner fixture has built and compiled the runtimes already."""


def test_run_code_prints_the_guest_output_and_exits_with_its_status():
    done = cli("run", "-c", "print('hi')\nimport sys; sys.exit(4)")
    assert done.stdout == "hi\n"
    assert done.returncode == 4


def test_run_script_in_a_workspace_keeps_its_files(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("open('result.txt', 'w').write('done')\nprint('wrote')")
    work = tmp_path / "work"
    done = cli("run", str(script), "--workspace", str(work))
    assert done.returncode == 0, done.stderr
    assert (work / "result.txt").read_text() == "done"


def test_json_output_is_the_result_struct_and_limits_come_from_flags():
    done = cli("run", "--json", "--timeout", "0.5", "-c", "import time; time.sleep(30)")
    result = json.loads(done.stdout)
    assert result["limit"] == "timeout" and result["exit_code"] == 137
    assert done.returncode == 137


def test_limit_hit_is_explained_on_stderr():
    done = cli("run", "--output-bytes", "100", "-c", "print('x' * 1000)")
    assert "limit output" in done.stderr and "truncated" in done.stderr


def test_bad_usage_is_a_clear_error():
    assert "either a script file or -c" in cli("run").stderr
    assert "--env takes KEY=VALUE" in cli("run", "-c", "1", "--env", "NOPE").stderr
    assert cli("run", "missing.py").returncode == 2


def test_env_flag_passes_one_variable():
    done = cli("run", "--env", "GREETING=hello", "-c", "import os; print(os.environ['GREETING'])")
    assert done.stdout == "hello\n"


def test_batch_writes_one_result_per_line_and_a_summary(tmp_path):
    items = tmp_path / "items.jsonl"
    lines = [{"id": f"ok{i}", "code": "def f(x): return x + 1", "harness": "check", "tests": "assert f(1) == 2"} for i in range(5)]
    lines.append({"id": "bad", "code": "def f(x): return x", "harness": "check", "tests": "assert f(1) == 2"})
    items.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = tmp_path / "results.jsonl"
    done = cli("batch", str(items), "-o", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    results = {r["id"]: r["verdict"] for r in map(json.loads, out.read_text().splitlines())}
    assert results == {**{f"ok{i}": "passed" for i in range(5)}, "bad": "failed"}
    assert "passed=5" in done.stderr and "failed=1" in done.stderr
