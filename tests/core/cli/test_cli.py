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


def test_run_of_a_guest_stuck_in_a_host_call_exits_with_its_timeout_instead_of_hanging():
    from stuck_guest import REAL_SLEEP

    try:
        done = subprocess.run([*CLI, "run", "--json", "--timeout", "1", "-c", REAL_SLEEP],
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the command did not exit: the stuck guest's thread held the interpreter")
    result = json.loads(done.stdout)
    assert result["limit"] == "timeout" and result["stdout"] == "before the sleep\n", result
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
    lines = [{"id": f"ok{i}", "code": "def f(x): return x + 1", "harness": "check", "tests": "assert f(1) == 2"}
             for i in range(5)]
    lines.append({"id": "bad", "code": "def f(x): return x", "harness": "check", "tests": "assert f(1) == 2"})
    items.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = tmp_path / "results.jsonl"
    done = cli("batch", str(items), "-o", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    results = {r["id"]: r["verdict"] for r in map(json.loads, out.read_text().splitlines())}
    assert results == {**{f"ok{i}": "passed" for i in range(5)}, "bad": "failed"}
    assert "passed=5" in done.stderr and "failed=1" in done.stderr


# -- named profiles, as the service has them ------------------------------------------------

def _native_problem() -> str | None:
    from wasm_runner.providers.native.bwrap import find_bwrap, probe

    path = find_bwrap()
    return "bubblewrap is not installed (run scripts/install-native.sh)" if path is None else probe(path)


needs_sandbox = pytest.mark.skipif(_native_problem() is not None, reason="no usable native sandbox")


@needs_sandbox
def test_profile_bash_runs_bash_natively():
    done = cli("run", "--json", "--profile", "bash", "-c", 'echo "bash $BASH_VERSION"')
    result = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert result["isolation"] == "bubblewrap" and result["language"] == "bash"
    assert result["stdout"].startswith("bash ") and len(result["stdout"]) > len("bash \n")


@needs_sandbox
def test_profile_python_data_imports_pandas():
    from wasm_runner.providers.native import find_python_data

    if find_python_data() is None:
        pytest.skip("the python-data environment is not built (wasm-runner prepare)")
    done = cli("run", "--profile", "python-data", "--timeout", "120", "-c",
               "import pandas\nprint(pandas.DataFrame({'a': [1, 2]})['a'].sum())")
    assert (done.returncode, done.stdout) == (0, "3\n"), done.stderr


@needs_sandbox
def test_profile_env_allowlist_applies():
    done = cli("run", "--profile", "bash", "--env", "SECRET=1", "-c", "echo $SECRET")
    assert done.returncode == 2 and "does not allow setting SECRET" in done.stderr


def test_unknown_profile_is_a_clear_error_listing_the_known_ones():
    done = cli("run", "--profile", "nope", "-c", "print(1)")
    assert done.returncode == 2 and done.stdout == ""
    assert "no profile named 'nope'" in done.stderr
    assert ("available: bash, bun, javascript, node, python, python-data, typescript, typescript-native"
            in done.stderr)


CONFIG = """
default_profile = "quick"

[server]                      # the service's own sections are left to it
port = 9999

[limits.default]
timeout_s = 2
[limits.max]
timeout_s = 5

[profiles.quick]
language = "python"
limits = { timeout_s = 0.5 }

[profiles.js]
language = "javascript"
"""


def test_a_config_files_profile_sets_the_limits_and_the_language(tmp_path):
    config = tmp_path / "wasm-runner.toml"
    config.write_text(CONFIG)
    done = cli("run", "--json", "--config", str(config), "--profile", "quick", "-c", "import time; time.sleep(30)")
    result = json.loads(done.stdout)
    assert result["limit"] == "timeout" and done.returncode == 137
    assert result["duration_ms"] < 5000
    done = cli("run", "--config", str(config), "--profile", "js", "-c", "console.log(6 * 7)")
    assert (done.returncode, done.stdout) == (0, "42\n"), done.stderr


def test_a_config_files_default_profile_and_maxima_apply(tmp_path):
    config = tmp_path / "wasm-runner.toml"
    config.write_text(CONFIG)
    done = cli("run", "--json", "--config", str(config), "-c", "import time; time.sleep(30)")
    assert json.loads(done.stdout)["limit"] == "timeout"  # the default profile's 0.5 s
    done = cli("run", "--config", str(config), "--timeout", "60", "-c", "print(1)")
    assert done.returncode == 2 and "limits.timeout_s = 60.0 exceeds the maximum 5.0" in done.stderr
    done = cli("run", "--config", str(config), "--timeout", "2", "-c", "print(1)")
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr


def test_an_invalid_config_file_is_a_clear_error(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[profiles.x]\nlanguage = "cobol"\n')
    done = cli("run", "--config", str(config), "-c", "print(1)")
    assert done.returncode == 2 and "invalid configuration" in done.stderr and "language" in done.stderr


def test_a_ts_file_runs_as_typescript_and_its_error_names_the_typescript_line(tmp_path):
    script = tmp_path / "job.ts"
    script.write_text("interface Job { n: number }\nconst job: Job = { n: 6 };\nconsole.log(job.n * 7);\n"
                      "\nthrow new Error('after');\n")
    done = cli("run", "--json", str(script))
    result = json.loads(done.stdout)
    assert result["stdout"] == "42\n" and result["language"] == "typescript"
    assert result["error"]["line"] == 5
    mts = tmp_path / "job.mts"
    mts.write_text("const n: number = await Promise.resolve(2);\nconsole.log(n);\nexport {};\n")
    done = cli("run", str(mts))
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr


def test_lang_typescript_runs_code():
    done = cli("run", "--lang", "typescript", "-c", "const s: string = 'ts';\nconsole.log(s.toUpperCase());")
    assert (done.returncode, done.stdout) == (0, "TS\n"), done.stderr


def test_typecheck_of_python_is_a_usage_error():
    done = cli("run", "--typecheck", "-c", "print(1)")
    assert done.returncode == 2 and "typecheck applies to language typescript only" in done.stderr


def test_run_install_flag_installs_before_the_run_and_refuses_native_wheels(tmp_path):
    from package_index import demo_wheels, serve_index

    with serve_index(demo_wheels(tmp_path / "wheels")) as index:
        done = cli("run", "--install", "tinyapp==1.0", "--index", index.simple, "-c", "import tinyapp\nprint(tinyapp.hello())")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "hello from tinyapp, tinydep 2.1\n" and "installed tinyapp==1.0" in done.stderr
        refused = cli("run", "--install", "fastext", "--index", index.simple, "-c", "import fastext")
    assert refused.returncode == 2 and "native_code" in refused.stderr and "python-data" in refused.stderr


def test_allow_net_lets_a_run_reach_only_the_named_destination(tmp_path):
    from loopback_origin import SMALL_BODY, Origin

    origin = Origin(tmp_path)
    try:
        code = ("import urllib.request\n"
                f"print(urllib.request.urlopen('http://127.0.0.1:{origin.port}/small').read().decode(), end='')")
        allowed = cli("run", "--allow-net", f"127.0.0.1:{origin.port}", "-c", code)
        assert allowed.returncode == 0, allowed.stderr
        assert allowed.stdout == SMALL_BODY.decode()
        other = cli("run", "--allow-net", f"127.0.0.1:{origin.port + 1}", "-c", code)
        assert other.returncode != 0 and "not in the allowlist" in other.stderr
        bad = cli("run", "--allow-net", "ftp://x", "-c", "pass")
        assert bad.returncode != 0 and "--allow-net" in bad.stderr
    finally:
        origin.close()


def test_allow_net_with_a_profile_may_only_narrow_the_profiles_policy(tmp_path):
    from loopback_origin import SMALL_BODY, Origin

    origin = Origin(tmp_path)
    config = tmp_path / "net.toml"
    config.write_text(f'[profiles.net]\nlanguage = "python"\n'
                      f'network = {{ mode = "allowlist", allow = ["127.0.0.1:{origin.port}"] }}\n')
    code = ("import urllib.request\n"
            f"print(urllib.request.urlopen('http://127.0.0.1:{origin.port}/small').read().decode(), end='')")
    try:
        profile = cli("run", "--config", str(config), "--profile", "net", "-c", code)
        assert profile.returncode == 0 and profile.stdout == SMALL_BODY.decode(), profile.stderr
        same = cli("run", "--config", str(config), "--profile", "net", "--allow-net", f"127.0.0.1:{origin.port}",
                   "-c", code)
        assert same.returncode == 0, same.stderr
        wider = cli("run", "--config", str(config), "--profile", "net", "--allow-net", "127.0.0.1:*", "-c", code)
        assert wider.returncode == 2 and "not within the profile's network policy" in wider.stderr
        assert f"127.0.0.1:{origin.port}" in wider.stderr  # what the profile allows
    finally:
        origin.close()


def test_batch_summary_file_has_counts_groups_and_pass_at_k(tmp_path):
    items = tmp_path / "items.jsonl"
    lines = []
    for task, right in (("t/0", 3), ("t/1", 1)):
        for sample in range(4):
            body = "return x + 1" if sample < right else "return x"
            lines.append({"task_id": task, "code": f"def f(x): {body}", "harness": "check", "tests": "assert f(1) == 2"})
    items.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    summary_file = tmp_path / "summary.json"
    done = cli("batch", str(items), "-o", str(tmp_path / "out.jsonl"), "--no-progress", "--group-field", "task_id",
               "--pass-at", "1,2", "--summary", str(summary_file))
    assert done.returncode == 0, done.stderr
    summary = json.loads(summary_file.read_text())
    assert summary["total"] == 8 and summary["by_verdict"] == {"failed": 4, "passed": 4}
    assert summary["by_group"]["t/0"]["passed"] == 3 and summary["by_group"]["t/1"]["passed"] == 1
    assert summary["pass_at_k"]["pass@1"] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert summary["pass_at_k"]["pass@2"] == pytest.approx((1.0 + (1 - 3 / 6)) / 2)  # t/1: 1 - C(3,2)/C(4,2)
    assert "pass@1=0.5000" in done.stderr
    assert cli("batch", str(items), "--pass-at", "0").returncode == 2


def test_typecheck_block_keeps_a_program_with_a_type_error_from_running(tmp_path):
    from wasm_runner.providers.native import find_js_toolchain
    from wasm_runner.providers.native.bwrap import find_bwrap, probe

    bwrap = find_bwrap()
    if bwrap is None or probe(bwrap) is not None or find_js_toolchain() is None:
        pytest.skip("typecheck needs bubblewrap and the JavaScript toolchain (wasm-runner prepare)")
    script = tmp_path / "main.ts"
    script.write_text("const n: number = 'two';\nconsole.log('ran');\n")
    checked = cli("run", "--typecheck", str(script))
    assert "TS2322" in checked.stderr and checked.stdout == "ran\n"
    blocked = cli("run", "--typecheck-block", str(script))
    assert blocked.returncode == 1 and blocked.stdout == ""
    assert "TS2322" in blocked.stderr and "1 type error, the program did not run; line 1:" in blocked.stderr
