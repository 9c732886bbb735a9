"""Preview addresses (http/preview_origins.py) and the cookie rule of the preview proxy, without a runtime."""

from __future__ import annotations

import pytest

from wasm_runner_server.config import PreviewSettings
from wasm_runner_server.errors import ApiError
from wasm_runner_server.http.preview_origins import LABEL, PreviewOrigins
from wasm_runner_server.http.routes.ports import cookie_stays_on


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_grant_names_its_port_and_session_until_it_expires_and_nothing_else_resolves() -> None:
    clock = Clock()
    origins = PreviewOrigins(PreviewSettings(port=0), clock=clock)
    origins.listener_port = 8081
    label, grant = origins.grant("alpha", "s1", 5.0, 3000, "k1", 60)
    assert LABEL.fullmatch(label) and label.startswith("3000-")
    assert origins.origin(label) == f"http://{label}.localhost:8081"
    assert origins.resolve(f"{label}.localhost:8081") == (label, grant)
    assert origins.resolve(f"{label.upper()}.LOCALHOST.:8081") == (label, grant)  # host names are case-blind
    other, _ = origins.grant("alpha", "s1", 5.0, 3000, "k1", 60)
    assert other != label  # a new link is a new address
    for host in (f"3001-{label[5:]}.localhost", "localhost:8081", "127.0.0.1:8081", f"x{label}.localhost"):
        with pytest.raises(ApiError) as refused:
            origins.resolve(host)
        assert refused.value.status == 404
    clock.now += 60
    with pytest.raises(ApiError):
        origins.resolve(f"{label}.localhost:8081")


def test_the_redirect_reuses_a_live_address_of_the_same_key_and_session_only() -> None:
    clock = Clock()
    origins = PreviewOrigins(PreviewSettings(domain="preview.test"), clock=clock)
    first, _ = origins.grant("alpha", "s1", 5.0, 3000, "k1", 3600, reuse=True)
    assert origins.grant("alpha", "s1", 5.0, 3000, "k1", 3600, reuse=True)[0] == first
    assert origins.grant("alpha", "s1", 5.0, 3000, "k2", 3600, reuse=True)[0] != first  # another key
    assert origins.grant("alpha", "s1", 6.0, 3000, "k1", 3600, reuse=True)[0] != first  # the id made again
    clock.now += 3600 - 30  # too little left to hand out again
    assert origins.grant("alpha", "s1", 5.0, 3000, "k1", 3600, reuse=True)[0] != first
    assert origins.origin(first) == f"https://{first}.preview.test"


def test_only_hosts_under_the_preview_domain_are_preview_hosts() -> None:
    origins = PreviewOrigins(PreviewSettings(domain="Preview.Test"))
    assert origins.is_preview_host("3000-x.preview.test") and origins.is_preview_host("PREVIEW.TEST:443")
    assert not origins.is_preview_host("api.test") and not origins.is_preview_host("evilpreview.test")
    assert not PreviewOrigins(PreviewSettings()).is_preview_host("3000-x.localhost:8081")


@pytest.mark.parametrize(("cookie", "stays"), [
    ("a=1", True), ("a=1; Path=/; HttpOnly", True), ("a=1; Domain=3000-x.localhost", True),
    ("a=1; Domain=.3000-X.localhost.", True), ("a=1; Domain=localhost", False), ("a=1; domain=.localhost", False),
    ("a=1; Domain=preview.test", False), ("a=1; Domain=3001-x.localhost", False), ("a=1;Domain =localhost", False),
])
def test_a_cookie_may_name_no_host_but_its_previews_own(cookie: str, stays: bool) -> None:
    assert cookie_stays_on(cookie, "3000-x.localhost") is stays


def test_the_preview_listener_sits_beside_the_api_unless_configured_and_a_domain_must_be_a_dns_name() -> None:
    from pydantic import ValidationError

    from wasm_runner_server.config import ServiceConfig
    from wasm_runner_server.http.preview_server import listener_port

    assert listener_port(ServiceConfig.model_validate({"server": {"port": 8080}})) == 8081
    assert listener_port(ServiceConfig.model_validate({"server": {"port": 0}})) == 0
    assert listener_port(ServiceConfig.model_validate({"server": {"port": 65535}})) == 0
    assert listener_port(ServiceConfig.model_validate({"server": {"port": 8080}, "previews": {"port": 9000}})) == 9000
    assert ServiceConfig.model_validate({"previews": {"domain": "Preview.Example.COM."}}).previews.domain == (
        "preview.example.com")
    for bad in ("localhost", "*.preview.test", "preview test", "https://preview.test", "-a.test"):
        with pytest.raises(ValidationError, match="previews.domain must be a DNS name"):
            ServiceConfig.model_validate({"previews": {"domain": bad}})
