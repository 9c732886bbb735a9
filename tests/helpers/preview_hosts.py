"""Reaching a preview's `*.localhost` origin from Python, which does not resolve those names as browsers do."""

from __future__ import annotations

from yarl import URL


def on_loopback(url: str) -> tuple[str, dict[str, str]]:
    """`url` with its host replaced by 127.0.0.1, and the Host header that names the preview."""
    parsed = URL(url)
    assert parsed.host is not None and parsed.host.endswith(".localhost"), url
    return str(parsed.with_host("127.0.0.1")), {"Host": f"{parsed.host}:{parsed.port}"}
