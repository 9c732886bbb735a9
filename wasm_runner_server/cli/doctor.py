"""`wasm-runner doctor --config FILE`: the machine's report, and the cluster's parts the config names.

With a PostgreSQL `[store]`: the database answers, its schema is this version's, and its clock agrees
with this node's (leases are timed by the database, rate limits by each node). With S3 `[storage]`: an
object can be written (conditionally), read back and deleted under the service's prefix.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from typing import Any

from wasm_runner.cli.machine import machine_report
from wasm_runner_server.config import ServiceConfig, load_config

CLOCK_SKEW_S = 1.0
"""A node whose clock is further than this from the database's is reported: its rate limits drift."""


def check_store(config: ServiceConfig) -> dict[str, Any]:
    from wasm_runner_server.metadata.migrations import STEPS
    from wasm_runner_server.metadata.settings import redact

    settings = config.store.with_environment()
    report: dict[str, Any] = {"url": redact(settings.url), "ok": False}
    try:
        import psycopg

        with psycopg.connect(settings.url, connect_timeout=int(settings.connect_timeout_s)) as conn:
            before = time.time()
            row = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
            after = time.time()
            version = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    except Exception as exc:  # whatever stops a node from using it: the report says what
        report["error"] = f"{type(exc).__name__}: {exc}".replace(settings.url, report["url"])
        return report
    skew = float(row[0]) - (before + after) / 2 if row else 0.0
    report.update(schema_version=version[0] if version else None, expected_version=len(STEPS),
                  clock_skew_s=round(skew, 3))
    report["ok"] = report["schema_version"] in (None, len(STEPS)) and abs(skew) <= CLOCK_SKEW_S
    if abs(skew) > CLOCK_SKEW_S:
        report["error"] = f"this node's clock is {skew:+.1f} s from the database's: run NTP on every node"
    elif report["schema_version"] not in (None, len(STEPS)):
        report["error"] = "the database's schema is another version's: run every node on one release"
    return report


def check_storage(config: ServiceConfig) -> dict[str, Any]:
    from wasm_runner_server.storage.objects import open_objects

    settings = config.storage
    report: dict[str, Any] = {"kind": settings.kind, "ok": False}
    report.update({"path": settings.path} if settings.kind == "posix" else
                  {"bucket": settings.bucket, "endpoint": settings.endpoint})
    key = f"{settings.prefix}doctor/{secrets.token_hex(8)}"
    probe = secrets.token_bytes(32)
    try:
        objects = open_objects(settings)
        objects.put_new(key, probe)
        try:
            report["ok"] = objects.get(key) == probe
        finally:
            objects.delete([key])
    except Exception as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        return report
    if not report["ok"]:
        report["error"] = "an object read back differs from what was written"
    return report


def cluster_report(config: ServiceConfig) -> dict[str, Any] | None:
    """The checks of the cluster's parts `config` names (None: it names none, one machine)."""
    report: dict[str, Any] = {}
    if config.store.with_environment().postgres:
        report["store"] = check_store(config)
    if config.storage.objects:
        report["storage"] = check_storage(config)
    return report or None


def _lines(report: dict[str, Any]) -> str:
    lines = ["", "cluster (from the config file):"]
    for part, found in report.items():
        mark = "ok  " if found["ok"] else "FAIL"
        detail = {k: v for k, v in found.items() if k not in ("ok", "error")}
        lines.append(f"  {mark} {part}: " + ", ".join(f"{k}={v}" for k, v in detail.items()))
        if "error" in found:
            lines.append(f"       {found['error']}")
    return "\n".join(lines)


def doctor_command(args: argparse.Namespace) -> int:
    report, text = machine_report()
    cluster = cluster_report(load_config(args.config)) if args.config else None
    if cluster is not None:
        report["cluster"] = cluster
        report["ok"] = report["ok"] and all(part["ok"] for part in cluster.values())
        text += _lines(cluster)
    print(json.dumps(report, indent=2) if args.json else text)
    return 0 if report["ok"] else 1
