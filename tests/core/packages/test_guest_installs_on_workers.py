"""`sandbox.install` from kernels on worker processes: the parent installs (its policy, its limits), the
guest's wait ends at its call's deadline, and a worker killed mid-wait costs only that call."""

import concurrent.futures
import os
import signal
import time

import pytest

from wasm_runner import Limits, Runner
from wasm_runner.packages import PackageSettings

pytestmark = pytest.mark.runtimes

HELLO = "import tinyapp\ntinyapp.hello()"


@pytest.fixture
def runner(tmp_path, fresh_index):
    with Runner(tmp_path / "data", kernel_workers=1, packages=PackageSettings(python_index=fresh_index.simple)) as r:
        assert r.kernel_workers is not None and r.kernel_workers.wait_ready(120)
        yield r


def wait_for(check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_the_parent_installs_for_a_guest_on_a_worker_and_refusals_reach_it(runner):
    session = runner.session()
    assert session.run_sync("kept = 41").ok
    asked = session.run_sync(f"import sandbox\nsandbox.install('tinyapp==1.0')\n{HELLO}")
    assert asked.value == "'hello from tinyapp, tinydep 2.1'", asked.stderr
    assert not asked.kernel_restarted and session.run_sync("kept + 1").value == "42"
    assert [p.name for p in session.lock().python] == ["tinyapp", "tinydep"]  # the parent's record
    native = session.run_sync("import sandbox\nsandbox.install('fastext')")
    assert native.error.type == "RuntimeError" and "native code" in native.error.message
    other = session.run_sync("import sandbox\nsandbox.install('tinydep', index='https://evil.test/simple/')")
    assert other.error.type == "RuntimeError" and "configured index only" in other.error.message
    assert runner.kernel_workers.stats.restarts.total() == 0


def test_the_guests_request_is_data_the_parent_checks(runner, fresh_index):
    session = runner.session()
    raw = ("import json, wit_world\n"
           "json.loads(wit_world.install_packages({!r}))")
    broken = session.run_sync(raw.format("not json"))
    assert "'ok': False" in broken.value and "JSON" in broken.value
    smuggled = ('{"python": ["tinydep==2.0"], "lock": {"python": [{"name": "evil", "version": "1", '
                '"filename": "evil-1-py3-none-any.whl", "sha256": "' + "0" * 64 + '", "size": 1, '
                '"url": "http://127.0.0.9/evil-1-py3-none-any.whl"}]}}')
    assert "'ok': True" in session.run_sync(raw.format(smuggled)).value
    assert [p.name for p in session.lock().python] == ["tinydep"]  # the lock the guest slipped in was ignored
    assert not any("evil" in path for path in fresh_index.requests)


def test_the_guests_wait_ends_at_its_calls_deadline_and_costs_no_worker(runner, fresh_index):
    session = runner.session()
    assert session.run_sync("1").ok
    fresh_index.open.clear()  # the index holds every request: the parent's resolution waits
    try:
        began = time.monotonic()
        result = session.run_sync("import sandbox\nsandbox.install('tinydep==2.0')", limits=Limits(timeout_s=1.5))
        elapsed = time.monotonic() - began
        assert fresh_index.requests, "the parent did not reach the index"
    finally:
        fresh_index.open.set()
    assert elapsed < 1.5 + 1.0, elapsed
    assert result.limit == "timeout" or "deadline" in result.error.message, result
    stats = runner.kernel_workers.stats
    assert stats.restarts.total() == 0 and stats.deadline_kills.total() == 0
    wait_for(lambda: [p.name for p in session.lock().python] == ["tinydep"])  # the install went on, and ended
    assert session.run_sync("import tinydep\ntinydep.VERSION").value == "'2.0'"


def test_a_worker_killed_while_its_guest_waits_for_an_install_loses_that_call_only(runner, fresh_index):
    session = runner.session()
    assert session.run_sync("1").ok
    worker = runner.kernel_workers.placement[session.id]
    fresh_index.open.clear()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            call = pool.submit(session.run_sync, "import sandbox\nsandbox.install('tinydep==2.0')",
                               limits=Limits(timeout_s=30))
            wait_for(lambda: bool(fresh_index.requests))
            os.kill(worker.pid, signal.SIGKILL)
            lost = call.result(timeout=10)
    finally:
        fresh_index.open.set()
    assert lost.error.type == "HostError" and "run it again" in lost.error.message, lost
    wait_for(lambda: [p.name for p in session.lock().python] == ["tinydep"])  # the parent's install ended
    after = session.run_sync("import tinydep\ntinydep.VERSION")
    assert after.value == "'2.0'" and after.kernel_restarted
