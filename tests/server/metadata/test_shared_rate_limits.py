"""The API keys' token buckets: the same contract in one process and in the cluster's database, where
a key's rate holds across nodes."""

from __future__ import annotations

import pytest

from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.security import stores


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _limiter(url: str, tmp_path, rate: float, burst: float, clock: Clock):
    config = ServiceConfig.model_validate({"server": {"data_dir": str(tmp_path)}, "store": {"url": url}})
    limiter = stores.rate_limiter(config, rate, burst)
    limiter.clock = clock  # both kinds read their time from `clock`
    return limiter


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request) -> str:
    return "sqlite" if request.param == "sqlite" else request.getfixturevalue("postgres_url")


def test_a_bucket_allows_its_burst_then_refills_at_its_rate(url, tmp_path):
    clock = Clock()
    limiter = _limiter(url, tmp_path, rate=2, burst=3, clock=clock)
    try:
        assert [limiter.take("k1") for _ in range(3)] == [0.0, 0.0, 0.0]
        assert limiter.take("k1") == pytest.approx(0.5)  # empty: one token comes in half a second
        assert limiter.take("k2") == 0.0  # another key has its own bucket
        clock.now += 0.5
        assert limiter.take("k1") == 0.0
        assert limiter.take("k1") > 0
        clock.now += 60  # refills up to the burst, not past it
        assert [limiter.take("k1") for _ in range(4)][:3] == [0.0, 0.0, 0.0]
        assert limiter.take("k1") > 0
    finally:
        limiter.close()


def test_a_keys_rate_holds_across_nodes(postgres_url, tmp_path):
    clock = Clock()
    node_a = _limiter(postgres_url, tmp_path / "a", rate=1, burst=4, clock=clock)
    node_b = _limiter(postgres_url, tmp_path / "b", rate=1, burst=4, clock=clock)
    try:
        taken = [node.take("key") for node in (node_a, node_b, node_a, node_b)]
        assert taken == [0.0] * 4
        assert node_a.take("key") > 0 and node_b.take("key") > 0  # the burst was the key's, not each node's
    finally:
        node_a.close()
        node_b.close()


def test_a_clock_behind_refills_nothing(postgres_url, tmp_path):
    clock = Clock()
    limiter = _limiter(postgres_url, tmp_path, rate=1, burst=1, clock=clock)
    try:
        assert limiter.take("key") == 0.0
        clock.now -= 30  # another node's clock, half a minute behind
        assert limiter.take("key") > 0
    finally:
        limiter.close()
