"""Property-based run of Schemathesis against /openapi.json of a live server on loopback:
whatever it generates (valid or not), the server never answers 5xx, and every answer matches the
schema the document gives for its status (fields a response always carries are required there)."""

from __future__ import annotations

import asyncio
import sys

import pytest

pytest.importorskip("schemathesis")

pytestmark = pytest.mark.asyncio

TIME_BUDGET_S = 60
SEEDS = (20261204, 20261205, 20261206)
"""Fixed seeds: the same inputs each run. A run can crash Schemathesis itself (its observations parse a
generated string as a link: "Invalid IPv6 URL", no request at fault); then the next seed is used."""
OWN_BUG = "Invalid IPv6 URL"


async def test_schemathesis_finds_no_server_errors(serve, tmp_path):
    client = await serve(server={"concurrency": 2, "queue_size": 64})
    schema_url = str(client.make_url("/openapi.json"))
    for seed in SEEDS:
        text, code = await _run(schema_url, seed, tmp_path)
        if OWN_BUG not in text:
            break  # (else Schemathesis itself crashed parsing a generated string as a link: the next seed)
    assert code == 0, text[-6000:]
    assert "Server error" not in text


async def _run(schema_url: str, seed: int, tmp_path) -> tuple[str, int | None]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schemathesis.cli", "run", schema_url,
        "--checks", "not_a_server_error,response_schema_conformance",
        # /v1/batch takes NDJSON, which schemathesis cannot generate (tests/server/test_http_batch.py covers
        # it); the preview proxy answers 502 by design when nothing listens on the port (no process runs
        # in a generated session; tests/server/security/test_preview_proxy.py covers it); the coverage
        # phase trips a CPython 3.11 ast.parse bug inside hypothesis, not the API.
        "--exclude-path", "/v1/batch", "--exclude-path", "/v1/sessions/{id}/ports/{port}/{path}",
        "--phases", "examples,fuzzing,stateful",
        "--max-examples", "10", "--max-time", str(TIME_BUDGET_S), "--workers", "2",
        "--request-timeout", "30", "--generation-database", "none", "--no-color",
        # a fixed seed: the same inputs each run (an unseeded run once crashed Schemathesis itself, parsing a
        # generated string as a link: "Invalid IPv6 URL" in its observations, no request at fault)
        "--seed", str(seed),
        "--report", "junit", "--report-dir", str(tmp_path / f"report-{seed}"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path,
    )
    output, _ = await asyncio.wait_for(process.communicate(), TIME_BUDGET_S + 120)
    text = output.decode(errors="replace")
    return text, process.returncode
