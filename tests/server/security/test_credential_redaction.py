"""A run holding a brokered credential cannot hand its secret back through the service: what it
prints is redacted in the streamed events, the result and the audit row, in any common encoding."""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest

from tests.helpers.server_helpers import call, new_session

pytestmark = pytest.mark.asyncio

SECRET = "svc-redact-s3cr3t-0c7e41"
ENCODED = base64.b64encode(f"Bearer {SECRET}".encode()).decode()
CODE = (f"secret = {SECRET[:8]!r} + {SECRET[8:]!r}\n"  # the guest came by it some way (an echoing destination)
        "import base64, sys\n"
        "print('token', secret, flush=True)\n"
        "print('header', base64.b64encode(('Bearer ' + secret).encode()).decode(), file=sys.stderr, flush=True)\n"
        "raise ValueError('bad ' + secret.encode().hex())")


async def events(response: aiohttp.ClientResponse) -> list[tuple[str, dict]]:
    """(event, data) of a server-sent event stream."""
    found, event, data = [], None, []
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and event is not None:
            found.append((event, json.loads("\n".join(data))))
            event, data = None, []
    return found


def leaked(text: str) -> list[str]:
    return [form for form in (SECRET, ENCODED, SECRET.encode().hex(), base64.b64encode(SECRET.encode()).decode())
            if form in text]


async def test_what_a_credentialed_run_prints_is_redacted_in_stream_result_and_audit(serve, monkeypatch):
    monkeypatch.setenv("SVC_REDACT_TOKEN", SECRET)
    profile = {"language": "python", "network": {"mode": "allowlist", "allow": ["api.example.test"], "credentials": [
        {"destinations": ["api.example.test"], "env": "SVC_REDACT_TOKEN"}]}}
    client = await serve(profiles={"net": profile})
    sid = await new_session(client, profile="net")
    async with client.post(f"/v1/sessions/{sid}/exec", json={"code": CODE},
                           headers={"Accept": "text/event-stream"}) as response:
        assert response.status == 200
        stream = await events(response)
    streamed = json.dumps([data for name, data in stream if name != "result"])
    assert leaked(streamed) == [] and "token [redacted]" in streamed and "header [redacted]" in streamed
    assert streamed.index("token") < streamed.index("header")  # a line without a secret is not held back
    result = stream[-1][1]
    assert stream[-1][0] == "result" and leaked(json.dumps(result)) == []
    assert result["stdout"] == "token [redacted]\n" and "[redacted]" in result["error"]["message"]
    status, rows = await call(client, "GET", "/v1/audit", params={"session": sid, "kind": "exec"})
    assert status == 200
    (row,) = rows["entries"]
    assert leaked(json.dumps(row)) == [] and row["stdout"] == "token [redacted]\n"
