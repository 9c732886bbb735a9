"""What a session installs, every later call imports: its kernel, fresh runs, after hibernation and restarts."""

import pytest

from wasm_runner import Runner
from wasm_runner.packages import PackageSettings

pytestmark = pytest.mark.runtimes

HELLO = "import tinyapp\ntinyapp.hello()"


@pytest.fixture
def make_runner(tmp_path, fresh_index):
    runners = []

    def make():
        runner = Runner(tmp_path / "data", isolation="in-process", packages=PackageSettings(python_index=fresh_index.simple))
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


def test_the_kernel_sees_an_install_made_while_it_is_live_and_keeps_its_state(make_runner):
    session = make_runner().session()
    assert session.run_sync("kept = 41").exit_code == 0
    assert session.run_sync(HELLO).error.type == "ModuleNotFoundError"
    assert session.install(["tinyapp==1.0"]).ok
    result = session.run_sync(HELLO + "\n")
    assert result.value == "'hello from tinyapp, tinydep 2.1'" and not result.kernel_restarted
    assert session.run_sync("kept + 1").value == "42"


def test_fresh_runs_hibernation_and_a_new_runner_see_the_packages(make_runner):
    runner = make_runner()
    session = runner.session("stays")
    assert session.install(["tinyapp==1.0"]).ok
    assert session.run_sync(HELLO, fresh=True).value == "'hello from tinyapp, tinydep 2.1'"
    assert session.run_sync("state = 1").exit_code == 0  # a kernel, which hibernation saves
    session.hibernate()
    after = session.run_sync(HELLO + "\nstate")
    assert after.kernel_restored and after.value == "1"
    assert session.run_sync(HELLO).value == "'hello from tinyapp, tinydep 2.1'"
    runner.close()
    restarted = make_runner().session("stays")  # the same data directory: a restart
    assert restarted.run_sync(HELLO).value == "'hello from tinyapp, tinydep 2.1'"
    assert [p.name for p in restarted.lock().python] == ["tinyapp", "tinydep"]


def test_the_guest_cannot_write_its_package_directory(make_runner):
    session = make_runner().session()
    assert session.install(["tinydep==2.0"]).ok
    result = session.run_sync("open('/packages/tinydep/__init__.py', 'w').write('VERSION = \"evil\"')")
    assert result.error is not None and result.error.type in ("PermissionError", "OSError")
    assert session.run_sync("import tinydep\ntinydep.VERSION", fresh=True).value == "'2.0'"


def test_the_guest_asks_the_host_to_install_with_sandbox_install(make_runner):
    runner = make_runner()
    session = runner.session()
    asked = session.run_sync("import sandbox\nresult = sandbox.install('tinyapp==1.0')\n"
                             "import tinyapp\n(tinyapp.hello(), sorted(p['name'] for p in result['installed']))")
    assert asked.value == "('hello from tinyapp, tinydep 2.1', ['tinyapp', 'tinydep'])", asked.stderr
    assert [p.name for p in session.lock().python] == ["tinyapp", "tinydep"]  # the host's record, not the guest's
    refused = session.run_sync("import sandbox\nsandbox.install('fastext')")
    assert refused.error.type == "RuntimeError" and "native code" in refused.error.message
    assert "python-data" in refused.error.message
    assert session.run_sync("1 + 1").value == "2"  # the kernel is still usable
    one_shot = runner.run_sync("import sandbox\nsandbox.install('tinydep')")
    assert one_shot.error.type == "RuntimeError" and "sessions only" in one_shot.error.message



def test_the_session_install_handler_ends_with_its_execution(make_runner):
    """The handler is per thread: once an execution ends, the next job on the thread gets none."""
    import json

    from wasm_runner.providers.base import Job
    from wasm_runner.providers.wasm import guest_installs

    runner = make_runner()
    session = runner.session()
    asked: list[str] = []
    job = Job(runner.request("import sandbox\nsandbox.install('tinydep')"), session.workspace.ensure(), {},
              mounts=session.mounts, install=lambda request: asked.append(request) or json.dumps({"ok": True}))
    session.packages.ensure()
    result = runner.providers[0].execute(job)  # on this thread
    assert result.exit_code == 0 and json.loads(asked[0])["python"] == ["tinydep"]
    after = json.loads(guest_installs.answer(None, "{}"))
    assert after["ok"] is False and "sessions only" in after["error"]["message"]
