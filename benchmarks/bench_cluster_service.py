"""The service on several nodes, sessions stored in object storage: prints one JSON object.

    python benchmarks/bench_cluster_service.py [--samples 15]

Starts its own PostgreSQL 15 and SeaweedFS S3 server on loopback (as the tests do) and real service
processes. Measures, as a client sees it:

- the cost of `call` durability: the latency of a small call (a variable and a small file changed)
  and of a call writing 10 MB, on a node with local storage against a node storing every call in S3
  (kernel image and changed chunks uploaded, the generation committed in PostgreSQL) before it answers,
  and against `checkpoint` durability (stored after the answer);
- forwarding: a small call through a node that does not hold the session (it relays the request to the
  node that does) against the same call sent to that node, interleaved;
- takeover after `kill -9` of a session's node, for a small workspace and one of about 50 MB: the time
  from the kill until a call through another (warm) node is answered with the session's state, with the
  lease time it includes (the lease must run out first), and the answering call alone (claim, restore of
  the files and the kernel, the call). The kill lands up to a third of a lease after the last renewal;
- hibernate and wake through object storage, for a small workspace and one of about 20 MB with a 20 MiB
  kernel: `:hibernate` on the session's node (its state stored, its lease let go), then the first call
  through the other node, which claims the session and restores its files and kernel; the session
  crosses back and forth between the two nodes, each crossing a sample.

Medians (and p90 where there are enough samples); the machine's load is printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "helpers"))

from postgres_server import postgres_server  # noqa: E402
from s3_server import s3_server  # noqa: E402
from service_process import serving  # noqa: E402

LEASE_S = 2.0
SMALL = "x = x + 1 if 'x' in globals() else 0\nwith open('small.txt', 'w') as f:\n    f.write(str(x))"
TEN_MB = "import os\nwith open('big.bin', 'wb') as f:\n    f.write(os.urandom(10 << 20))"
FIFTY_MB = ("import os\nfor i in range(50):\n    with open(f'part{i}.bin', 'wb') as f:\n"
            "        f.write(os.urandom(1 << 20))\nx = 42")


def _config(path: Path, name: str, db: str | None, storage: dict | None) -> Path:
    lines = ["[server]", "prepare_on_start = false"]
    if db is not None:
        lines += ["[store]", f'url = "{db}"', f'node = "{name}"']
    if storage is not None:
        lines += ["[storage]", *(f"{k} = {json.dumps(v)}" for k, v in {**storage, "lease_s": LEASE_S}.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _key(data_dir: Path, db: str | None) -> str:
    from wasm_runner_server.config import ServiceConfig
    from wasm_runner_server.security import stores

    store = {"url": db} if db is not None else {}
    config = ServiceConfig.model_validate({"server": {"data_dir": str(data_dir)}, "store": store})
    tenants = stores.tenant_store(config, data_dir)
    key, _ = tenants.create_key("bench", "bench", "admin")
    tenants.close()
    return key


async def _call(http: httpx.AsyncClient, url: str, session: str, code: str, auth) -> float:
    start = time.perf_counter()
    answer = await http.post(f"{url}/v1/sessions/{session}/exec", json={"code": code}, headers=auth)
    elapsed = time.perf_counter() - start
    assert answer.status_code == 200 and answer.json()["exit_code"] == 0, answer.text
    return elapsed * 1000


def _summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    out = {"p50": round(statistics.median(values), 2)}
    if len(values) >= 10:
        out["p90"] = round(values[int(len(values) * 0.9) - 1], 2)
    return out


async def durability(tmp: Path, db: str, storage: dict, samples: int) -> dict:
    report: dict[str, dict] = {}
    kinds = {"local": (None, None), "s3_call": (db, storage),
             "s3_checkpoint": (db, {**storage, "durability": "checkpoint", "checkpoint_s": 30})}
    for kind, (store_url, section) in kinds.items():
        data_dir = tmp / f"durability-{kind}"
        config = _config(tmp / f"durability-{kind}.toml", f"d-{kind}", store_url, section)
        key = _key(data_dir, store_url)
        auth = {"Authorization": f"Bearer {key}"}
        async with serving(data_dir, config=config) as (_, url), httpx.AsyncClient(timeout=120) as http:
            session = (await http.post(f"{url}/v1/sessions", json={}, headers=auth)).json()["id"]
            for _ in range(3):  # the kernel started, the first uploads made
                await _call(http, url, session, SMALL, auth)
            small = [await _call(http, url, session, SMALL, auth) for _ in range(samples)]
            big = [await _call(http, url, session, TEN_MB, auth) for _ in range(max(3, samples // 5))]
        report[kind] = {"small_call_ms": _summary(small), "call_writing_10mb_ms": _summary(big)}
    for what in ("small_call_ms", "call_writing_10mb_ms"):
        for kind in ("s3_call", "s3_checkpoint"):
            report.setdefault(f"added_by_{kind}_durability_ms", {})[what] = round(
                report[kind][what]["p50"] - report["local"][what]["p50"], 2)
    return report


async def forwarding(tmp: Path, db: str, samples: int) -> dict:
    """A call and a file read sent to the session's node, and the same through another node, interleaved."""
    configs = {name: _config(tmp / f"fwd-{name}.toml", f"fwd-{name}", db, None) for name in ("a", "b")}
    for config in configs.values():  # back-to-back calls: past the default 50 requests per second per key
        config.write_text(config.read_text() + "[auth]\nrate_per_s = 100000\nburst = 100000\n")
    key = _key(tmp / "fwd-a", db)
    auth = {"Authorization": f"Bearer {key}"}
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=120) as http:
        (_, url_a), (_, url_b) = await asyncio.gather(
            *(stack.enter_async_context(serving(tmp / f"fwd-{name}", config=config)) for name, config in configs.items()))
        session = (await http.post(f"{url_a}/v1/sessions", json={}, headers=auth)).json()["id"]
        await http.put(f"{url_a}/v1/sessions/{session}/files/f.txt", content=b"x" * 1000, headers=auth)
        timings: dict[str, list[float]] = {"call_direct": [], "call_forwarded": [], "read_direct": [],
                                           "read_forwarded": []}
        for round_ in range(samples * 4 + 5):
            for kind, url in (("direct", url_a), ("forwarded", url_b)):
                called = await _call(http, url, session, "x = 1", auth)
                start = time.perf_counter()
                read = await http.get(f"{url}/v1/sessions/{session}/files/f.txt", headers=auth)
                assert read.status_code == 200, read.text
                if round_ >= 5:  # the kernel, the connections and the forwarding client warm
                    timings[f"call_{kind}"].append(called)
                    timings[f"read_{kind}"].append((time.perf_counter() - start) * 1000)
    report: dict[str, object] = {name: _summary(values) for name, values in timings.items()}
    report["added_p50_ms"] = {what: round(report[f"{what}_forwarded"]["p50"] - report[f"{what}_direct"]["p50"], 2)
                              for what in ("call", "read")}
    return report


async def takeover(tmp: Path, db: str, storage: dict, name: str, setup: str) -> dict:
    node_b_dir = tmp / f"{name}-b"
    config_b = _config(tmp / f"{name}-b.toml", f"{name}-b", db, storage)
    config_a = _config(tmp / f"{name}-a.toml", f"{name}-a", db, storage)
    key = _key(node_b_dir, db)
    auth = {"Authorization": f"Bearer {key}"}
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=300) as http:
        (proc_a, url_a), (_, url_b) = await asyncio.gather(
            stack.enter_async_context(serving(tmp / f"{name}-a", config=config_a)),
            stack.enter_async_context(serving(node_b_dir, config=config_b)))
        warm = (await http.post(f"{url_b}/v1/sessions", json={}, headers=auth)).json()["id"]
        await _call(http, url_b, warm, "pass", auth)  # node B's kernel workers up: a warm node takes over
        session = (await http.post(f"{url_a}/v1/sessions", json={}, headers=auth)).json()["id"]
        await _call(http, url_a, session, setup + "\nx = 42", auth)
        await _call(http, url_a, session, "y = x", auth)  # the kernel warm, its image stored once more
        proc_a.kill()
        killed = time.perf_counter()
        await proc_a.wait()
        while True:
            start = time.perf_counter()
            answer = await http.post(f"{url_b}/v1/sessions/{session}/exec", json={"code": "print(x)"}, headers=auth)
            if answer.status_code not in (421, 503):  # node A's lease still live (503: it does not answer)
                break
            await asyncio.sleep(0.02)
        done = time.perf_counter()
        assert answer.status_code == 200 and answer.json()["stdout"] == "42\n", answer.text
        sizes = sum(p.stat().st_size for p in (node_b_dir / "sessions" / session).rglob("*") if p.is_file())
    return {"workspace_bytes": sizes, "lease_s": LEASE_S, "kill_to_served_s": round(done - killed, 3),
            "answering_call_ms": round((done - start) * 1000, 1),
            "kernel_restored": bool(answer.json().get("kernel_restored"))}


TWENTY_MB = ("import os\nfor i in range(20):\n    with open(f'part{i}.bin', 'wb') as f:\n"
             "        f.write(os.urandom(1 << 20))\nheap = bytearray(os.urandom(20 << 20))\nx = 42")


def _lease_left_s(db: str, session: str) -> float:
    import psycopg

    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT expires_at - extract(epoch from clock_timestamp()) FROM leases "
                           "WHERE session_id = %s", (session,)).fetchone()
    return row[0] if row is not None else 0.0


async def hibernate_wake(tmp: Path, db: str, storage: dict, name: str, setup: str, samples: int) -> dict:
    """`:hibernate` on the session's node until its lease is let go, then the first call through the other."""
    configs = {side: _config(tmp / f"{name}-{side}.toml", f"{name}-{side}", db, storage) for side in ("a", "b")}
    auth = {"Authorization": f"Bearer {_key(tmp / f'{name}-a', db)}"}
    timings: dict[str, list[float]] = {"hibernate_ms": [], "let_go_ms": [], "wake_call_ms": []}
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=300) as http:
        (_, url_a), (_, url_b) = await asyncio.gather(
            *(stack.enter_async_context(serving(tmp / f"{name}-{side}", config=config))
              for side, config in configs.items()))
        for url in (url_a, url_b):  # both nodes' kernel workers up: a warm node wakes the session
            warm = (await http.post(f"{url}/v1/sessions", json={}, headers=auth)).json()["id"]
            await _call(http, url, warm, "pass", auth)
        session = (await http.post(f"{url_a}/v1/sessions", json={}, headers=auth)).json()["id"]
        await _call(http, url_a, session, setup, auth)
        sizes = sum(p.stat().st_size for p in (tmp / f"{name}-a" / "sessions" / session).rglob("*") if p.is_file())
        holder, other = url_a, url_b
        for _ in range(samples):
            start = time.perf_counter()
            slept = await http.post(f"{holder}/v1/sessions/{session}:hibernate", headers=auth)
            assert slept.status_code == 200 and slept.json()["state"] == "hibernated", slept.text
            timings["hibernate_ms"].append((time.perf_counter() - start) * 1000)
            while await asyncio.to_thread(_lease_left_s, db, session) > 0:
                await asyncio.sleep(0.005)
            timings["let_go_ms"].append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            answer = await http.post(f"{other}/v1/sessions/{session}/exec", json={"code": "print(x)"}, headers=auth)
            timings["wake_call_ms"].append((time.perf_counter() - start) * 1000)
            assert answer.status_code == 200 and answer.json()["stdout"] == "42\n", answer.text
            assert answer.json().get("kernel_restored"), answer.text
            holder, other = other, holder
    return {"workspace_bytes": sizes, **{what: _summary(values) for what, values in timings.items()}}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()
    import tempfile

    with postgres_server() as pg, s3_server(volumes=64) as s3, tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp_dir:
        tmp = Path(tmp_dir)
        report = {
            "load_avg": os.getloadavg(),
            "cpus": os.cpu_count(),
            "forwarding": await forwarding(tmp, pg.new_database(), args.samples),
            "durability": await durability(tmp, pg.new_database(), s3.settings(), args.samples),
            "takeover_small": await takeover(tmp, pg.new_database(), s3.settings(), "small", "pass"),
            "takeover_50mb": await takeover(tmp, pg.new_database(), s3.settings(), "big", FIFTY_MB),
            "hibernate_wake_small": await hibernate_wake(tmp, pg.new_database(), s3.settings(), "hw-small", "x = 42",
                                                         args.samples),
            "hibernate_wake_20mb": await hibernate_wake(tmp, pg.new_database(), s3.settings(), "hw-big", TWENTY_MB,
                                                        args.samples),
        }
        report["load_avg_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
