"""Which loopback names native tools reach directly (NO_PROXY): only those the policy does not allow."""

import pytest

from wasm_runner.egress.policy import EgressRules
from wasm_runner.providers.native.egress import no_proxy
from wasm_runner_protocol.egress import EgressPolicy


@pytest.mark.parametrize(("allow", "expected"), [
    ((), "localhost,127.0.0.1,::1"),
    (("api.example.com",), "localhost,127.0.0.1,::1"),
    (("127.0.0.1:8080",), "localhost,::1"),
    (("127.0.0.0/8:*", "[::1]:*"), "localhost"),
    (("localhost:3000",), "127.0.0.1,::1"),
])
def test_an_allowed_loopback_destination_goes_through_the_proxy(allow, expected):
    assert no_proxy(EgressRules(EgressPolicy(mode="allowlist", allow=allow))) == expected
