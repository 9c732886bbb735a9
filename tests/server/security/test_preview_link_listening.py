"""A preview link says whether anything listens on its port yet (a link to a silent port was
indistinguishable from a working one until the browser got a 502)."""

from __future__ import annotations

from process_calls import NATIVE_ROOT_SERVICE, SECTIONS, devserver, new_session

pytestmark = NATIVE_ROOT_SERVICE


async def test_a_link_to_a_silent_port_says_so_and_one_to_a_listening_port_does_not(start_secure) -> None:
    secure = await start_secure(**SECTIONS)
    sid = await new_session(secure)
    status, early, _ = await secure.call("POST", f"/v1/sessions/{sid}/ports/8000:presign", "a_member", json={})
    assert status == 200, early
    assert early["listening"] is False
    assert "nothing listens on port 8000" in early["hint"] and "POST /v1/sessions/{id}/processes" in early["hint"]

    await devserver(secure, sid, 8000)
    status, ready, _ = await secure.call("POST", f"/v1/sessions/{sid}/ports/8000:presign", "a_member", json={})
    assert status == 200, ready
    assert ready["listening"] is True and ready["hint"] is None
    status, other, _ = await secure.call("POST", f"/v1/sessions/{sid}/ports/8001:presign", "a_member", json={})
    assert other["listening"] is False and "wait until it listens" in other["hint"]  # a server runs, not on 8001


async def test_the_egress_relays_port_is_never_reported_as_listening(start_secure) -> None:
    net = {"language": "bash", "provider": "native", "network": {"mode": "allowlist", "allow": ["127.0.0.1:9"]}}
    secure = await start_secure(profiles={"net": net}, **SECTIONS)
    sid = await new_session(secure, profile="net")
    await devserver(secure, sid, 8000)  # its sandbox runs the relay to the egress proxy on 3128 too
    status, relay, _ = await secure.call("POST", f"/v1/sessions/{sid}/ports/3128:presign", "a_member", json={})
    assert status == 200 and relay["listening"] is False, relay
