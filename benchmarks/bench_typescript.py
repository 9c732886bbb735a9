"""TypeScript benchmark: prints one JSON object of medians measured side by side in one run.

    python benchmarks/bench_typescript.py [--samples 200] [--native-samples 15]

Fresh `console.log` in WebAssembly, TypeScript beside JavaScript (the transpile's cost); a
200-line TypeScript program fresh in WebAssembly; `typecheck: true` (tsc, natively); and the
same 200-line file started natively by Node (type stripping) and bun, through the native
provider (bubblewrap) and as a plain host subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_core import fresh_latency, percentiles, time_calls  # noqa: E402

from wasm_runner import ExecRequest, Limits, Runner  # noqa: E402
from wasm_runner.providers.native import find_js_toolchain  # noqa: E402
from wasm_runner.runner import default_providers  # noqa: E402


def program_200_lines() -> str:
    """Interfaces, an enum, generics, classes and functions: 200 lines that print one line."""
    lines = ["enum Kind { A = 1, B = 2, C = 3 }", "interface Item<T> { id: number; kind: Kind; value: T }"]
    for i in range(24):
        lines += [
            f"interface Shape{i} {{ area(): number; name: string }}",
            f"class Box{i}<T> implements Shape{i} {{",
            "  constructor(public readonly side: number, public name: string, private tag?: T) {}",
            f"  area(): number {{ return this.side * this.side + {i}; }}",
            "}",
            f"function make{i}(n: number): Item<Box{i}<string>> {{",
            f"  return {{ id: n, kind: Kind.B, value: new Box{i}(n, 'b{i}') }};",
            "}",
        ]
    lines.append("let total: number = 0;")
    while len(lines) < 199:
        k = len(lines) % 24
        lines.append(f"total += make{k}({len(lines) % 7}).value.area() as number;")
    lines.append("console.log(total > 0 ? 2 : 0);")
    return "\n".join(lines) + "\n"


def typecheck_time(runner: Runner, code: str, samples: int) -> dict:
    def once():
        result = runner.run_sync(ExecRequest(code=code, language="typescript", typecheck=True))
        assert result.diagnostics == [], result.diagnostics

    once()
    return percentiles(time_calls(once, samples))


def native_start(runner: Runner, code: str, env: dict[str, str], samples: int) -> dict:
    request = ExecRequest(code=code, language="typescript", provider="native", env=env, limits=Limits(timeout_s=60))

    def once():
        result = runner.run_sync(request)
        assert result.exit_code == 0 and result.stdout.strip() == "2", result

    once()
    return percentiles(time_calls(once, samples))


def plain_start(argv: list[str], code: str, samples: int) -> dict:
    """The same file started directly on the host, no sandbox (what the sandbox adds is the difference)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "main.ts")
        path.write_text(code)

        def once():
            done = subprocess.run([*argv, str(path)], capture_output=True, text=True, check=False)
            assert done.stdout.strip() == "2", done.stderr

        once()
        return percentiles(time_calls(once, samples))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--native-samples", type=int, default=15)
    args = parser.parse_args()
    big = program_200_lines()
    report: dict = {"machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
                    "program_lines": big.count("\n")}
    with Runner(concurrency=2, isolation="in-process", providers=default_providers()) as runner:
        runner.prepare()
        for gap in (0.02, 0):
            suffix = "" if gap else "_back_to_back"
            report[f"javascript_fresh{suffix}"] = fresh_latency(runner, "javascript", "console.log(1+1)",
                                                                args.samples, gap)
            report[f"typescript_fresh{suffix}"] = fresh_latency(runner, "typescript", "console.log(1+1)",
                                                                args.samples, gap)
        report["typescript_fresh_200_lines"] = fresh_latency(runner, "typescript", big, args.samples // 2, 0.02)
        toolchain = find_js_toolchain()
        if toolchain is None:
            report["native"] = "the JavaScript toolchain is not built (wasm-runner prepare)"
        else:
            started = time.perf_counter()
            report["typecheck_200_lines"] = typecheck_time(runner, big, max(3, args.native_samples // 3))
            report["typecheck_200_lines"]["first_ms"] = round((time.perf_counter() - started) * 1000, 1)
            report["node_native_start_200_lines"] = native_start(runner, big, {}, args.native_samples)
            report["bun_native_start_200_lines"] = native_start(runner, big, {"WASM_RUNNER_JS_RUNTIME": "bun"},
                                                                args.native_samples)
            node = str(toolchain.host_path("node"))
            report["node_plain_start_200_lines"] = plain_start(
                [node, "--experimental-transform-types", "--disable-warning=ExperimentalWarning"], big,
                args.native_samples)
            report["bun_plain_start_200_lines"] = plain_start([str(toolchain.host_path("bun"))], big,
                                                              args.native_samples)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
