"""Egress decisions in the audit log: kept per execution and per background process, the secrets the
run's credentials can add removed, and only counts for an ephemeral session."""

from __future__ import annotations

import json
from types import SimpleNamespace

from wasm_runner.egress.credentials import CredentialBroker
from wasm_runner_protocol.egress import Credential, NetworkEvent
from wasm_runner_server.security.audit import AuditFilter, AuditLog

SECRET = "audit-s3cr3t-9b1f"


def events() -> list[NetworkEvent]:
    """One allowed request, and one refusal whose text happens to carry the secret (an echoed header)."""
    return [NetworkEvent(allowed=True, host="api.example.test", port=443, status=200, credential=True),
            NetworkEvent(allowed=False, host="evil.test", port=443, reason=f"refused after seeing Bearer {SECRET}")]


def test_execution_and_process_rows_keep_their_decisions_with_secrets_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_TEST_TOKEN", SECRET)
    redact = CredentialBroker([Credential(destinations=("api.example.test",), env="AUDIT_TEST_TOKEN")]).redact
    log = AuditLog.in_data_dir(tmp_path)
    result = SimpleNamespace(stdout="", stderr="", network=events(), exit_code=0)
    log.record_execution(workspace="w", key_id="k", session="s", ephemeral=False, mode="session", profile="p",
                         provider="wasm", language="python", code="x", command=None, result=result, outcome="ok",
                         finished_at=1.0, redact=redact)
    log.record_process(workspace="w", key_id="k", session="s", ephemeral=False, event="exit", process_id="p1",
                       command=["sh"], code="", language="bash", state="exited", exit_code=0, started_at=1.0,
                       finished_at=2.0, stdout_bytes=0, stderr_bytes=0, error=None, network=events(), redact=redact)
    log.record_process(workspace="w", key_id="k", session="e", ephemeral=True, event="network", process_id="p2",
                       command=["sh"], code="", language="bash", state="running", exit_code=None, started_at=1.0,
                       finished_at=None, stdout_bytes=0, stderr_bytes=0, error=None, network=events(), redact=redact)
    rows = log.query(AuditFilter(), limit=10)
    log.close()
    kept = {(row["kind"], row["mode"]): row for row in rows}
    for key in (("exec", "session"), ("process", "exit")):
        network = kept[key]["network"]
        assert SECRET not in network and "[redacted]" in network, key
        assert [e["allowed"] for e in json.loads(network)] == [True, False]
    ephemeral = kept[("process", "network")]
    assert json.loads(ephemeral["network"]) == {"allowed": 1, "denied": 1}
    assert ephemeral["ts"] > 2.0  # a batch row is stamped when it is written, not at the start


def test_an_execution_row_redacts_the_secret_in_code_stdout_and_stderr_in_any_encoding(tmp_path, monkeypatch):
    import base64

    monkeypatch.setenv("AUDIT_TEST_TOKEN", SECRET)
    redact = CredentialBroker([Credential(destinations=("api.example.test",), env="AUDIT_TEST_TOKEN")]).redact
    log = AuditLog.in_data_dir(tmp_path)
    encoded = base64.b64encode(f"Bearer {SECRET}".encode()).decode()
    result = SimpleNamespace(stdout=f"got {SECRET}\n", stderr=f"echo {encoded}\n", network=[], exit_code=0)
    log.record_execution(workspace="w", key_id="k", session="s", ephemeral=False, mode="session", profile="p",
                         provider="wasm", language="python", code=f"print('{SECRET}')", command=None, result=result,
                         outcome="ok", finished_at=1.0, redact=redact)
    log.record_process(workspace="w", key_id="k", session="s", ephemeral=False, event="exit", process_id="p1",
                       command=["sh"], code=f"echo {SECRET}", language="bash", state="failed", exit_code=1,
                       started_at=1.0, finished_at=2.0, stdout_bytes=0, stderr_bytes=0, error=f"died: {SECRET}",
                       redact=redact)
    rows = log.query(AuditFilter(), limit=10)
    log.close()
    text = json.dumps(rows)
    assert SECRET not in text and encoded not in text
    execution = next(row for row in rows if row["kind"] == "exec")
    assert execution["stdout"] == "got [redacted]\n" and execution["code"] == "print('[redacted]')"
