"""Package install benchmark: prints one JSON object measured in one run.

    python benchmarks/bench_packages.py [--rounds 5]

A small pure-Python package with one dependency (`tinyapp` -> `tinydep`, wheels built here and
served by a loopback PEP 503 index) installed into a new session: first from the index (a new
workspace cache each round: resolution with uv, two downloads, unpacking), then from the cache
(a second session of the same workspace: no index request); then the first import of it in the
session's kernel, and an import in a fresh run beside a fresh run that imports nothing (a
session's fresh run makes a new instance). Medians of the rounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

from package_index import demo_wheels, serve_index  # noqa: E402

from wasm_runner import Runner  # noqa: E402
from wasm_runner.packages import PackageSettings  # noqa: E402

IMPORT = "import tinyapp\ntinyapp.hello()"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"index_ms": [], "cache_ms": [], "kernel_import_ms": [], "fresh_import_ms": [],
                                     "fresh_without_import_ms": []}
    requests_from_cache: list[int] = []
    with tempfile.TemporaryDirectory() as tmp, serve_index(demo_wheels(Path(tmp) / "wheels")) as index:
        with Runner(Path(tmp) / "data", packages=PackageSettings(python_index=index.simple)) as runner:
            runner.prepare()
            for round_ in range(args.rounds):
                workspace = f"bench{round_}"  # a new cache: the first install goes to the index
                first = runner.session()
                started = time.perf_counter()
                result = first.install(["tinyapp==1.0"], workspace=workspace)
                samples["index_ms"].append((time.perf_counter() - started) * 1000)
                assert result.ok, result.error
                second = runner.session()
                index.reset()
                started = time.perf_counter()
                cached = second.install(["tinyapp==1.0"], workspace=workspace)
                samples["cache_ms"].append((time.perf_counter() - started) * 1000)
                assert cached.ok and {p.source for p in cached.installed} == {"cache"}
                requests_from_cache.append(len(index.requests))
                second.run_sync("0")  # the kernel exists: what follows is the import alone
                started = time.perf_counter()
                imported = second.run_sync(IMPORT)
                samples["kernel_import_ms"].append((time.perf_counter() - started) * 1000)
                assert imported.value is not None, imported.stderr
                started = time.perf_counter()
                second.run_sync(IMPORT, fresh=True)
                samples["fresh_import_ms"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()  # the peer: a fresh run of the session that imports nothing
                second.run_sync("0", fresh=True)
                samples["fresh_without_import_ms"].append((time.perf_counter() - started) * 1000)
                first.destroy()
                second.destroy()
    print(json.dumps({
        "benchmark": "packages", "rounds": args.rounds, "python": platform.python_version(),
        "package": "tinyapp==1.0 (+ tinydep 2.1)",
        **{f"{name}_p50": round(statistics.median(values), 3) for name, values in samples.items()},
        "index_requests_from_cache": max(requests_from_cache),
    }, indent=2))


if __name__ == "__main__":
    main()
