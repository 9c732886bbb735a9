"""The result cache: keyed by everything that decides a verdict, safe under concurrent writers, bounded."""

import asyncio
import multiprocessing
import os

import msgspec
import pytest

from wasm_runner import ExecRequest, ExecResult, Limits
from wasm_runner.evaluation.cache import ResultCache
from wasm_runner_protocol.execution import IoCase

BASE = ExecRequest(code="def f(x): return x", harness="check", tests="assert f(1) == 1", id="a")


def test_the_key_covers_every_field_that_decides_a_verdict(tmp_path):
    cache = ResultCache(tmp_path)
    key = cache.key(BASE)
    assert key == cache.key(msgspec.structs.replace(BASE, id="other", group="g"))  # not what decides it
    changed = [
        msgspec.structs.replace(BASE, code="def f(x): return 1"),
        msgspec.structs.replace(BASE, tests="assert f(2) == 2"),
        msgspec.structs.replace(BASE, limits=Limits(timeout_s=9)),
        msgspec.structs.replace(BASE, limits=Limits(memory_bytes=64 * 1024 * 1024)),
        msgspec.structs.replace(BASE, language="javascript"),
        msgspec.structs.replace(BASE, harness="script"),
        msgspec.structs.replace(BASE, stdin="x"),
        msgspec.structs.replace(BASE, env={"A": "1"}),
        ExecRequest(code="print(1)", harness="io", cases=[IoCase(expected="1\n")]),
        ExecRequest(code="print(1)", harness="io", cases=[IoCase(expected="1\n", timeout_s=1)]),
        ExecRequest(code="print(1)", harness="io", cases=[IoCase(expected="1\n")], compare="numeric"),
    ]
    keys = [cache.key(r) for r in changed]
    assert key not in keys and len(set(keys)) == len(keys)
    assert cache.key(ExecRequest(code="echo hi", language="bash")) is None  # native: not pinned by any hash


def test_a_hit_is_marked_and_carries_the_asking_requests_id(tmp_path):
    cache = ResultCache(tmp_path)
    assert cache.get(BASE) is None
    assert cache.put(BASE, ExecResult(verdict="passed", stdout="out", id="a", group="g"))
    hit = cache.get(msgspec.structs.replace(BASE, id="b", group="h"))
    assert (hit.verdict, hit.stdout, hit.cached, hit.id, hit.group) == ("passed", "out", True, "b", "h")
    assert cache.stats() == {"hits": 1, "misses": 1, "stores": 1, "damaged": 0}


def test_results_that_say_nothing_about_the_item_are_not_kept(tmp_path):
    cache = ResultCache(tmp_path)
    from wasm_runner_protocol.execution import GuestError
    assert not cache.put(BASE, ExecResult(exit_code=1, error=GuestError(type="HostError", message="lost")))
    assert not cache.put(BASE, ExecResult(exit_code=137, limit="cancelled"))
    assert cache.get(BASE) is None


def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path):
    cache = ResultCache(tmp_path)
    cache.put(BASE, ExecResult(verdict="passed"))
    path = cache._path(cache.key(BASE))
    path.write_bytes(b"\x00garbage")
    assert cache.get(BASE) is None and not path.exists()


def test_the_cache_is_bounded_and_evicts_the_least_recently_used(tmp_path):
    cache = ResultCache(tmp_path, max_bytes=20_000)
    requests = [msgspec.structs.replace(BASE, code=f"x = {i}") for i in range(200)]
    cache.put(requests[0], ExecResult(verdict="passed", stdout="y" * 100))
    for i, request in enumerate(requests[1:], 1):
        cache.put(request, ExecResult(verdict="passed", stdout="y" * 100))
        if i % 20 == 0:
            assert cache.get(requests[0]) is not None  # kept in use: never the oldest for long
            os.utime(cache._path(cache.key(requests[0])), (1e10, 1e10))
    assert cache.size_bytes() <= 20_000
    assert cache.get(requests[0]) is not None
    assert cache.get(requests[1]) is None  # the oldest unused went first
    assert cache.get(requests[-1]) is not None


def _writer(directory, worker, count, shared):
    cache = ResultCache(directory, max_bytes=60_000)
    for i in range(count):
        code = f"x = {i}" if i % 2 else f"x = {worker}-{i}"  # half the keys shared by every writer
        request = msgspec.structs.replace(BASE, code=code)
        cache.put(request, ExecResult(verdict="passed", stdout=f"{worker}:{i}" * 20))
        cache.get(msgspec.structs.replace(BASE, code=f"x = {count - i}"))
    shared.value += cache.damaged


def test_concurrent_writers_in_processes_never_leave_a_partial_entry(tmp_path):
    context = multiprocessing.get_context("fork")
    damaged = context.Value("i", 0)
    writers = [context.Process(target=_writer, args=(tmp_path, w, 300, damaged)) for w in range(4)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(60)
    assert [p.exitcode for p in writers] == [0, 0, 0, 0]
    assert damaged.value == 0
    cache = ResultCache(tmp_path, max_bytes=60_000)
    entries = list(cache.entries.rglob("*.msgpack"))
    assert entries and cache.size_bytes() <= 60_000 * 1.2  # each writer's estimate lags the others' writes
    decode = msgspec.msgpack.Decoder(ExecResult).decode
    assert all(decode(p.read_bytes()).verdict == "passed" for p in entries)
    assert list(cache.temp.iterdir()) == []


def test_a_repeated_batch_is_answered_from_the_cache_and_a_changed_limit_misses(runner, tmp_path):
    cache = ResultCache(tmp_path / "cache")
    items = [ExecRequest(code="import random\nv = random.random()\ndef f(): return v", harness="check",
                         tests=f"assert f() >= 0 or {i}", id=f"i{i}") for i in range(6)]

    async def run(requests):
        return {r.id: r async for r in runner.run_many(requests, cache=cache)}

    first = asyncio.run(run(items))
    assert not any(r.cached for r in first.values()) and cache.stats()["stores"] == 6
    again = asyncio.run(run(items))
    assert all(r.cached for r in again.values()) and sorted(again) == sorted(first)
    assert all(r.verdict == "passed" for r in again.values())
    changed = [msgspec.structs.replace(r, limits=Limits(timeout_s=7)) for r in items[:2]]
    third = asyncio.run(run([*changed, items[2]]))
    assert [third[i].cached for i in ("i0", "i1", "i2")] == [False, False, True]


@pytest.mark.parametrize("bad", [0, -1])
def test_a_bound_must_be_positive(tmp_path, bad):
    with pytest.raises(ValueError):
        ResultCache(tmp_path, max_bytes=bad)
