"""Batch throughput on one machine against the same batch through a Ray cluster, and the result cache.

    python benchmarks/bench_cluster.py [--items 2000] [--rounds 3]

HumanEval-shaped checks (benchmarks/humaneval_problems.py, the problems whose candidate ends,
repeated to `--items`) through `Runner.run_many` on this machine's lanes, and through the Ray
backend on a local Ray of one node with the same CPUs, alternating, `--rounds` times each;
checks/s are medians. Each path runs a warm-up batch first: worker processes and the node's
actor are made once and kept, as they are for a Runner that runs batch after batch. Then the
result cache: the batch with an empty cache, and the same batch again (every item a hit).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the local Ray advertises loopback

import humaneval_problems  # noqa: E402

from wasm_runner import ExecRequest, Limits, Runner  # noqa: E402
from wasm_runner.cluster import RayCluster  # noqa: E402
from wasm_runner.evaluation.cache import ResultCache  # noqa: E402

TARGET_RATIO = 0.8
"""The Ray path should reach this share of the local checks/s on the same cores."""


def checks(count: int) -> list[ExecRequest]:
    problems = [p for p in humaneval_problems.problems() if p.kind != "loop"]
    # Each item its own sample (as a model's completions are): the cache sees distinct keys.
    return [ExecRequest(code=f"{humaneval_problems.candidate(p)}\n# sample {i}", harness="check", tests=p.tests,
                        group=p.id, limits=Limits(timeout_s=5), id=f"{i}:{humaneval_problems.expected_verdict(p)}")
            for i, p in ((i, problems[i % len(problems)]) for i in range(count))]


async def timed_batch(runner: Runner, items: list[ExecRequest], **options) -> tuple[float, list]:
    started = time.perf_counter()
    results = [result async for result in runner.run_many(items, **options)]
    elapsed = time.perf_counter() - started
    wrong = [r.id for r in results if r.verdict != r.id.split(":", 1)[1]]
    assert len(results) == len(items) and not wrong, wrong[:5]
    return elapsed, results


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import ray

    cpus = os.cpu_count() or 2
    ray.init(num_cpus=cpus, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")
    cluster = RayCluster(address="auto", keep_actors_s=600)
    items = checks(args.items)
    local_rates, ray_rates = [], []
    with Runner(concurrency=cpus) as runner:
        await timed_batch(runner, items[:200], concurrency=cpus)
        await timed_batch(runner, items[:200], cluster=cluster)
        for _ in range(args.rounds):
            elapsed, _ = await timed_batch(runner, items, concurrency=cpus)
            local_rates.append(len(items) / elapsed)
            elapsed, _ = await timed_batch(runner, items, cluster=cluster)
            ray_rates.append(len(items) / elapsed)

        with tempfile.TemporaryDirectory() as directory:
            cache = ResultCache(directory)
            first, _ = await timed_batch(runner, items, concurrency=cpus, cache=cache)
            again, results = await timed_batch(runner, items, concurrency=cpus, cache=cache)
            hits = sum(result.cached for result in results)
    ray.shutdown()

    local, on_ray = statistics.median(local_rates), statistics.median(ray_rates)
    print(json.dumps({
        "date": datetime.date.today().isoformat(),
        "cpus": cpus,
        "items": len(items),
        "rounds": args.rounds,
        "local_checks_per_s": round(local, 1),
        "ray_checks_per_s": round(on_ray, 1),
        "local_rounds": [round(r, 1) for r in local_rates],
        "ray_rounds": [round(r, 1) for r in ray_rates],
        "ray_share_of_local": round(on_ray / local, 3),
        "target_share": TARGET_RATIO,
        "met": on_ray / local >= TARGET_RATIO,
        "cache": {"first_s": round(first, 3), "repeat_s": round(again, 3), "hit_rate": round(hits / len(items), 4),
                  "repeat_checks_per_s": round(len(items) / again, 1)},
    }, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
