"""Sessions: kernels keep state like notebook cells; files persist; limit hits roll the kernel back."""

import asyncio

import pytest

from wasm_runner import Limits, Runner


@pytest.fixture(scope="module", params=["in-process", "kernel-workers"])
def runner(request, runner, tmp_path_factory):
    """Every test here runs twice: kernels in this process, and kernels on worker processes."""
    if request.param == "in-process":
        yield runner
        return
    with Runner(tmp_path_factory.mktemp("kernel-workers"), kernel_workers=2) as on_workers:
        assert on_workers.kernel_workers is not None and on_workers.kernel_workers.wait_ready(120)
        yield on_workers


def test_kernel_keeps_variables_and_imports_between_calls(runner):
    session = runner.session()
    assert session.run_sync("import math\nx = 20").exit_code == 0
    result = session.run_sync("x + math.floor(2.5)")
    assert result.value == "22" and not result.kernel_restarted
    assert session.kernels == ["python"]
    session.destroy()


def test_kernel_environment_keeps_guest_changes_until_a_call_passes_other_variables(runner):
    session = runner.session()
    session.run_sync("import os\nos.environ['MINE'] = '1'")
    assert session.run_sync("import os\nos.environ.get('MINE')").value == "'1'"
    passed = session.run_sync("import os\n(os.environ.get('MINE'), os.environ['GIVEN'])", env={"GIVEN": "x"})
    assert passed.value == "(None, 'x')"  # other variables: the environment is set afresh
    assert session.run_sync("import os\nos.environ.get('GIVEN')").value is None


def test_fresh_run_sees_the_same_files_but_no_state(runner):
    session = runner.session()
    session.run_sync("secret = 1\nopen('shared.txt', 'w').write('data')")
    fresh = session.run_sync("print(open('shared.txt').read())\nsecret", fresh=True)
    assert fresh.stdout == "data\n"
    assert fresh.error.type == "NameError"
    assert session.run_sync("secret").value == "1"  # the kernel was not disturbed
    session.destroy()


def test_files_persist_across_calls_and_sessions_objects(runner):
    session = runner.session("persist-me")
    for i in range(5):
        session.run_sync(f"open('log.txt', 'a').write('{i}')", fresh=True)
    again = runner.session("persist-me")
    assert again.run_sync("open('log.txt').read()").value == "'01234'"
    session.destroy()


def test_a_limit_hit_rolls_the_kernel_back_and_keeps_the_files(runner):
    session = runner.session()
    session.run_sync("state = 'before'\nopen('kept.txt', 'w').write('kept')")
    hit = session.run_sync("state = 'during'\nopen('during.txt', 'w').write('1')\nwhile True: pass",
                           limits=Limits(timeout_s=0.3))
    assert hit.limit == "timeout" and hit.kernel_rolled_back
    assert "during.txt" in hit.files.created  # the failed call's files stay, and are listed
    after = session.run_sync("print(open('kept.txt').read(), open('during.txt').read())\nstate")
    assert not after.kernel_restarted and not after.kernel_rolled_back
    assert after.stdout == "kept 1\n" and after.value == "'before'"
    session.destroy()


def test_calls_that_each_write_new_pages_roll_back_and_hibernate_whole(runner):
    """Pages a call writes for the first time join the checkpoint out of order; a rollback and a
    save (which writes them in order) keep every one."""
    session = runner.session()
    for i in range(5):
        session.run_sync(f"v{i} = bytes([{i}]) * 300_000")
    hit = session.run_sync("while True: pass", limits=Limits(timeout_s=0.3))
    assert hit.limit == "timeout" and hit.kernel_rolled_back
    check = "[len(v) == 300_000 and v[-1] == i for i, v in enumerate([v0, v1, v2, v3, v4])]"
    assert session.run_sync(check).value == "[True, True, True, True, True]"
    session.hibernate(wait_s=30)
    back = session.run_sync(check)
    assert back.kernel_restored and back.value == "[True, True, True, True, True]"
    session.destroy()


def test_hibernation_saves_the_kernel_and_the_next_call_restores_it(runner):
    session = runner.session()
    session.run_sync("x = 1\nopen('f', 'w').write('1')")
    session.hibernate(wait_s=30)
    assert session.kernels == []
    result = session.run_sync("import os\n(os.path.exists('f'), x)")
    assert result.kernel_restored and not result.kernel_restarted and result.value == "(True, 1)"
    session.destroy()


def test_a_kernel_holding_a_file_open_is_not_saved_and_the_restart_says_why(runner):
    session = runner.session()
    session.run_sync("x = 1\nhandle = open('held.txt', 'w')")
    session.hibernate(wait_s=30)
    result = session.run_sync("'x' in globals()")
    assert result.kernel_restarted and result.value == "False"
    assert "open" in result.restart_reason and "descriptors" in result.restart_reason
    session.destroy()


def test_a_file_held_open_across_calls_is_never_rolled_back_to(runner):
    session = runner.session()
    session.run_sync("x = 1\nhandle = open('held.txt', 'w')")
    session.run_sync("y = 2")  # a call that changes no descriptor of its own
    hit = session.run_sync("while True: pass", limits=Limits(timeout_s=0.3))
    assert hit.limit == "timeout" and not hit.kernel_rolled_back  # a new instance would lack the handle
    after = session.run_sync("'x' in globals()")
    assert after.kernel_restarted and after.value == "False"
    assert "descriptors" in after.restart_reason
    session.destroy()


def test_a_sessions_first_fuel_metered_call_is_charged_its_own_work(runner):
    session = runner.session()
    first = session.run_sync("x = 1", limits=Limits(fuel=20_000_000))  # importing importlib.metadata took 54 M
    assert first.error is None and first.fuel_used < 5_000_000, (first.error, first.fuel_used)
    session.destroy()


def test_changing_fuel_metering_rebuilds_the_kernel(runner):
    session = runner.session()
    session.run_sync("y = 5")
    metered = session.run_sync("y", limits=Limits(fuel=10**9))
    assert metered.kernel_restarted and metered.error.type == "NameError"
    session.destroy()


def test_destroy_removes_files(runner):
    session = runner.session()
    session.run_sync("open('x', 'w').write('1')")
    path = session.path
    assert path.exists()
    session.destroy()
    assert not path.exists()


async def test_calls_to_one_session_run_in_order(runner):
    session = runner.session()
    await session.run("order = []")
    await asyncio.gather(*[session.run(f"import time\ntime.sleep(0.01 * ({5 - i}))\norder.append({i})") for i in range(5)])
    assert (await session.run("order")).value == "[0, 1, 2, 3, 4]"
    session.destroy()


async def test_cancelling_the_caller_stops_the_guest(runner):
    session = runner.session()
    task = asyncio.create_task(session.run("while True: pass", limits=Limits(timeout_s=30)))
    await asyncio.sleep(0.5)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    started = asyncio.get_running_loop().time()
    result = await session.run("'alive'")
    assert result.value == "'alive'" and not result.kernel_restarted  # the cancelled call was rolled back
    assert asyncio.get_running_loop().time() - started < 5
    session.destroy()


async def test_streaming_listener_sees_output_before_the_run_ends(runner):
    seen = []
    loop = asyncio.get_running_loop()
    first_chunk = asyncio.Event()

    def listener(stream, data):
        seen.append((stream, data))
        loop.call_soon_threadsafe(first_chunk.set)

    task = asyncio.create_task(runner.run("import time\nprint('early')\ntime.sleep(1)\nprint('late')", listener=listener))
    await asyncio.wait_for(first_chunk.wait(), 5)
    assert not task.done()
    assert seen[0] == ("stdout", b"early\n")
    result = await task
    assert result.stdout == "early\nlate\n"
