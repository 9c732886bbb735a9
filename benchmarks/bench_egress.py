"""Egress latency benchmark: prints one JSON object measured in one run.

    python benchmarks/bench_egress.py [--requests 200]

A GET of a small body (22 bytes) from a loopback HTTP server, timed request by request with
the same urllib code in three places: directly in the host's Python (the peer: no proxy, whatever
the environment says), inside a WASI Python session kernel (http.client over the host import: the
host resolves, checks the policy, connects with urllib3), and inside a native sandbox (bubblewrap;
python3 through the host's egress proxy, bridged into the sandbox's network namespace). Each
place's first requests warm it up and are left out. p50/p90 in milliseconds, each tier's p50
added to the direct one, and whether that meets the target.
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

from loopback_origin import Origin  # noqa: E402

from wasm_runner import Limits, Runner  # noqa: E402
from wasm_runner.egress.resolver import Resolver  # noqa: E402
from wasm_runner.egress.settings import EgressSettings  # noqa: E402
from wasm_runner.providers.wasm.provider import WasmProvider  # noqa: E402
from wasm_runner_protocol.egress import EgressPolicy  # noqa: E402
from wasm_runner_protocol.execution import ExecRequest  # noqa: E402

WARM = 10
NAME = "origin.bench.test"
TARGET_ADDED_P50_MS = {"wasi": 1.0, "native": 3.0}
"""What each tier may add to a direct request's p50."""
PROXIES = "urllib.request.ProxyHandler()"
"""The loop's proxy handler as written: the guest's environment decides (the native sandbox sets one)."""
LOOP = """
import json, time, urllib.request
url, n = {url!r}, {n}
opener = urllib.request.build_opener(urllib.request.ProxyHandler())
times = []
for i in range(n):
    t = time.perf_counter()
    with opener.open(url) as r:
        r.read()
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps(times))
"""


def summary(times: list[float]) -> dict[str, float]:
    times = sorted(times[WARM:])
    return {"p50_ms": round(statistics.median(times), 3),
            "p90_ms": round(times[int(len(times) * 0.9) - 1], 3), "n": len(times)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    n = args.requests + WARM
    root = Path(tempfile.mkdtemp(prefix="bench-egress-"))
    origin = Origin(root)
    # Sandboxes name the server (a pinned name: the native tier's NO_PROXY covers 127.0.0.1 itself).
    settings = EgressSettings(resolver=Resolver({NAME: ["127.0.0.1"]}))
    url = f"http://{NAME}:{origin.port}/small"
    policy = EgressPolicy(mode="allowlist", allow=(f"{NAME}:{origin.port}", f"127.0.0.1:{origin.port}"))
    code = LOOP.format(url=url, n=n)
    results: dict[str, object] = {"benchmark": "egress", "python": platform.python_version(),
                                  "requests": args.requests, "body_bytes": 22}
    namespace: dict[str, object] = {}
    direct = LOOP.format(url=f"http://127.0.0.1:{origin.port}/small", n=n).replace(
        PROXIES, "urllib.request.ProxyHandler({})")  # truly direct: no proxy from the host's environment
    exec(compile(direct.replace("print(json.dumps(times))", "RESULT = times"), "<direct>", "exec"), namespace)
    results["direct_host"] = summary(namespace["RESULT"])  # type: ignore[arg-type]

    providers: list = [WasmProvider(prewarm_languages=(), egress=settings)]
    try:
        from wasm_runner.providers.native import NativeProvider
        from wasm_runner.providers.native.bwrap import find_bwrap, probe

        path = find_bwrap()
        problem = "bubblewrap is not installed" if path is None else probe(path)
        if problem is None:
            providers.append(NativeProvider(egress=settings))
    except ImportError as exc:
        problem = str(exc)
    with Runner(root / "data", isolation="in-process", providers=providers) as runner:
        session = runner.session()
        result = session.run_sync(ExecRequest(code=code, egress=policy, limits=Limits(timeout_s=120)))
        if not result.ok:
            raise SystemExit(f"the WASI run failed: {result.error}")
        results["wasi_python"] = summary(json.loads(result.stdout))
        results["wasi_events"] = len(result.network)
        if problem is None:
            native = runner.run_sync(ExecRequest(command=["/usr/bin/python3", "-c",
                                                          code],
                                                 egress=policy, limits=Limits(timeout_s=120)))
            if native.exit_code != 0:
                raise SystemExit(f"the native run failed: {native.stderr[-2000:]}")
            results["native_proxy"] = summary(json.loads(native.stdout))
            results["native_events"] = len(native.network)
        else:
            results["native_proxy"] = {"skipped": problem}
    origin.close()
    base = results["direct_host"]["p50_ms"]  # type: ignore[index]
    for tier, key in (("wasi", "wasi_python"), ("native", "native_proxy")):
        measured = results[key]
        if "p50_ms" not in measured:  # type: ignore[operator]
            continue
        added = round(measured["p50_ms"] - base, 3)  # type: ignore[index]
        results[f"{tier}_added_p50_ms"] = added
        results[f"{tier}_added_p50_target_ms"] = TARGET_ADDED_P50_MS[tier]
        results[f"{tier}_target_met"] = added <= TARGET_ADDED_P50_MS[tier]
    results["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
