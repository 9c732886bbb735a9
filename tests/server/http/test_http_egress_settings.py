"""The operator's `[egress]` section reaches every run of the service: its byte cap and pinned names
apply in sessions (kernels on worker processes) and in one-shot runs alike. A loopback origin
stands in for the outside; a pinned name points at it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.helpers.loopback_origin import BIG_BYTES, SMALL_BODY, Origin
from tests.helpers.server_helpers import call, make_config, new_session, run

CAP = 200_000
NAME = "api.pinned.test"
FETCH = ("import urllib.request\n"
         "data = urllib.request.urlopen('http://{name}:{port}{path}', timeout=10).read()\n"
         "print(len(data))")


@pytest.fixture
def origin(tmp_path):
    server = Origin(tmp_path)
    yield server
    server.close()


def sections(port: int, **egress) -> dict:
    return {"egress": {"max_bytes": CAP, "resolver_overrides": {NAME: ["127.0.0.1"]}, **egress},
            "profiles": {"net": {"language": "python",
                                 "network": {"mode": "allowlist", "allow": [f"{NAME}:{port}", f"127.0.0.1:{port}"]}}},
            "default_profile": "net"}


@pytest.mark.asyncio
async def test_the_configured_cap_cuts_a_session_response_and_a_one_shot_one(serve, origin):
    client = await serve(**sections(origin.port))
    sid = await new_session(client)
    small = await run(client, sid, FETCH.format(name=NAME, port=origin.port, path="/small"))
    assert small["exit_code"] == 0, small  # the pinned name resolves to the origin
    assert small["stdout"].strip() == str(len(SMALL_BODY))

    big = await run(client, sid, FETCH.format(name=NAME, port=origin.port, path="/big"))
    assert big["exit_code"] != 0 and big["error"]["type"] == "NetworkLimitExceeded", big
    assert str(CAP) in big["error"]["message"] and "[egress] max_bytes" in big["error"]["hint"]
    [event] = big["network"]
    assert event["allowed"] and CAP - 2000 <= event["bytes_received"] <= CAP < BIG_BYTES

    status, once = await call(client, "POST", "/v1/exec",
                              json={"code": FETCH.format(name=NAME, port=origin.port, path="/big")})
    assert status == 200, once
    assert once["error"]["type"] == "NetworkLimitExceeded" and str(CAP) in once["error"]["message"]


@pytest.mark.asyncio
async def test_without_the_section_the_default_cap_lets_the_same_response_through(serve, origin):
    config = sections(origin.port)
    config["egress"].pop("max_bytes")
    client = await serve(**config)
    sid = await new_session(client)
    big = await run(client, sid, FETCH.format(name=NAME, port=origin.port, path="/big"))
    assert big["exit_code"] == 0, big
    assert big["stdout"].strip() == str(BIG_BYTES)


@pytest.mark.parametrize(("egress", "words"), [
    ({"extra_ca_file": "/nonexistent/ca.pem"}, "not a file"),
    ({"resolver_overrides": {"x.test": ["not-an-address"]}}, "IP addresses"),
    ({"max_bytes": -1}, "greater than or equal"),
])
def test_a_bad_egress_section_is_refused_at_start_saying_what_is_wrong(tmp_path, egress, words):
    with pytest.raises(ValidationError) as caught:
        make_config(tmp_path, egress=egress)
    assert words in str(caught.value)
