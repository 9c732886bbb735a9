"""A bounded load test on loopback: 3 workspaces x 4 sessions, executions and file reads in parallel,
every cross-workspace read refused, and exactly one audit row per execution. Prints its figures."""

from __future__ import annotations

import asyncio
import json
import time

WORKSPACES = {"alpha": "a_member", "beta": "b_member", "gamma": "c_member"}
SESSIONS_PER_WORKSPACE = 4
ROUNDS = 3


async def test_three_workspaces_under_load_no_cross_reads_no_lost_audit_rows(start_secure):
    secure = await start_secure(server={"concurrency": 2, "queue_size": 256},
                                auth={"rate_per_s": 1000, "burst": 1000})
    sessions: dict[str, list[str]] = {}
    for ws, key in WORKSPACES.items():
        sessions[ws] = [(await secure.call("POST", "/v1/sessions", key, json={}))[1]["id"]
                        for _ in range(SESSIONS_PER_WORKSPACE)]
    executions, cross_reads, cross_refused, leaks, statuses = 0, 0, 0, [], {}
    latencies: list[float] = []

    async def worker(ws: str, key: str, sid: str) -> None:
        nonlocal executions, cross_reads, cross_refused
        for n in range(ROUNDS):
            code = f"open('secret.txt', 'w').write('{ws}:{sid}:{n}')\nprint('{ws}', {n})"
            started = time.perf_counter()
            status, res, _ = await secure.call("POST", f"/v1/sessions/{sid}/exec", key, json={"code": code})
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                executions += 1
                assert res["stdout"] == f"{ws} {n}\n", res
            for other_ws, other_sessions in sessions.items():
                if other_ws == ws:
                    continue
                target = other_sessions[n % len(other_sessions)]
                cross_reads += 1
                status, body, _ = await secure.call("GET", f"/v1/sessions/{target}/files/secret.txt", key)
                if status == 404:
                    cross_refused += 1
                else:
                    leaks.append((ws, target, status, body))
            status, own, _ = await secure.call("GET", f"/v1/sessions/{sid}/files/secret.txt", key)
            assert status == 200 and own == f"{ws}:{sid}:{n}"

    started = time.perf_counter()
    await asyncio.gather(*(worker(ws, key, sid) for ws, key in WORKSPACES.items() for sid in sessions[ws]))
    elapsed = time.perf_counter() - started
    audit_rows = 0
    for ws, key in WORKSPACES.items():
        cursor, rows = None, []
        while True:
            query = "/v1/audit?kind=exec&limit=5" + (f"&cursor={cursor}" if cursor else "")
            _, page, _ = await secure.call("GET", query, key)
            rows += page["entries"]
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert all(r["workspace"] == ws for r in rows)
        assert {r["session"] for r in rows} == set(sessions[ws])
        audit_rows += len(rows)
    latencies.sort()
    figures = {"workspaces": len(WORKSPACES), "sessions": sum(map(len, sessions.values())),
               "executions_ok": executions, "statuses": statuses, "cross_workspace_reads": cross_reads,
               "cross_workspace_refused_404": cross_refused, "leaks": len(leaks), "audit_exec_rows": audit_rows,
               "elapsed_s": round(elapsed, 2), "exec_p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
               "exec_p95_ms": round(latencies[int(len(latencies) * 0.95)] * 1000, 1)}
    print("\nLOAD " + json.dumps(figures))
    assert not leaks
    assert cross_refused == cross_reads
    assert executions == len(WORKSPACES) * SESSIONS_PER_WORKSPACE * ROUNDS
    assert audit_rows == executions
