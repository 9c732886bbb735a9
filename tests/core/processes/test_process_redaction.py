"""A background process holding a brokered credential has its secret redacted in its output rings."""

from __future__ import annotations

import base64

import pytest

from wasm_runner import Runner
from wasm_runner.providers.native.bwrap import find_bwrap, probe
from wasm_runner_protocol.egress import Credential

_path = find_bwrap()
SANDBOX_PROBLEM = "bubblewrap is not installed (run scripts/install-native.sh)" if _path is None else probe(_path)
pytestmark = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no usable sandbox: {SANDBOX_PROBLEM}")

SECRET = "proc-s3cr3t-a81f07"


def test_what_a_credentialed_process_prints_is_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCESS_REDACT_TOKEN", SECRET)
    credential = Credential(destinations=("api.example.test",), env="PROCESS_REDACT_TOKEN")
    encoded = base64.b64encode(SECRET.encode()).decode()
    script = (f"s={SECRET[:6]}; s=${{s}}{SECRET[6:]}\n"  # the program came by it some way
              "echo \"plain $s\"; sleep 0.2; printf 'b64 %s\\n' \"$(printf %s \"$s\" | base64)\" >&2; echo done")
    with Runner(tmp_path / "data") as runner:
        process = runner.session("s").start_process(code=script, credentials=(credential,))
        assert process.wait(20) == 0
        stdout, stderr = process.text("stdout"), process.text("stderr")
    assert stdout == "plain [redacted]\ndone\n" and stderr == "b64 [redacted]\n"
    assert SECRET not in stdout + stderr and encoded not in stdout + stderr
