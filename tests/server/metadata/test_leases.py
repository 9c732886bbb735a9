"""Sessions' leases in a real PostgreSQL: one holder at a time, taken over only once expired, and a
holder whose epoch is gone can commit nothing."""

from __future__ import annotations

import time

import psycopg

from wasm_runner_server.cluster.leases import Leases
from wasm_runner_server.metadata.settings import StoreSettings


def _leases(url: str, node: str, lease_s: float = 0.5) -> Leases:
    return Leases(StoreSettings(url=url), node, lease_s)


def _expire(url: str, session_id: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:  # as if its node had stopped renewing long ago
        conn.execute("UPDATE leases SET expires_at = expires_at - 3600 WHERE session_id = %s", (session_id,))


def test_a_live_lease_is_not_taken_and_an_expired_one_is_with_a_new_epoch(postgres_url):
    a, b = _leases(postgres_url, "node-a", 60), _leases(postgres_url, "node-b", 60)
    try:
        assert a.create("s1").epoch == 1
        assert b.claim("s1") is None  # node-a's lease is live
        assert a.commit("s1", 1, 1, 10)
        _expire(postgres_url, "s1")
        taken = b.claim("s1")
        assert taken is not None and (taken.epoch, taken.generation) == (2, 1)
        holder = b.holder("s1")
        assert holder is not None and holder.node == "node-b" and holder.expires_in_s > 50
        assert a.claim("s1") is None  # and now node-b's is live
    finally:
        a.close()
        b.close()


def test_a_stale_holder_can_neither_commit_nor_renew(postgres_url):
    a, b = _leases(postgres_url, "node-a", 60), _leases(postgres_url, "node-b", 60)
    try:
        a.create("s2")
        assert a.commit("s2", 1, 1, 10)
        _expire(postgres_url, "s2")
        taken = b.claim("s2")
        assert taken is not None
        assert not a.commit("s2", 1, 2, 99)  # node-a, paused, comes back with epoch 1
        assert a.renew({"s2": 1}) == set()
        assert b.commit("s2", taken.epoch, 3, 30)
        assert not b.commit("s2", taken.epoch, 3, 99)  # a generation is committed once
        assert b.stored_bytes(["s2", "unknown"]) == {"s2": 30}  # the stale holder's 99 counted for nothing
        assert b.renew({"s2": taken.epoch}) == {"s2"}
    finally:
        a.close()
        b.close()


def test_a_claim_moves_the_session_row_to_the_claiming_node(postgres_url):
    a, b = _leases(postgres_url, "node-a"), _leases(postgres_url, "node-b")
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("INSERT INTO sessions (id, node, profile, created_at, last_used_at, idle_timeout_s, ttl_s, "
                         "expires_at) VALUES ('s3', 'node-a', 'default', 0, 0, 60, 3600, 3600)")
        a.create("s3")
        deadline = time.monotonic() + 10
        while b.claim("s3") is None:  # expires by the database's clock, half a second after its creation
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT node FROM sessions WHERE id = 's3'").fetchone() == ("node-b",)
    finally:
        a.close()
        b.close()


def test_a_session_without_a_lease_is_claimed_only_by_its_own_node(postgres_url):
    """A session made before object storage was configured: its node gets a lease at start, another
    node cannot take it (its files were never stored)."""
    a, b = _leases(postgres_url, "node-a", 60), _leases(postgres_url, "node-b", 60)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("INSERT INTO sessions (id, node, profile, created_at, last_used_at, idle_timeout_s, ttl_s, "
                         "expires_at) VALUES ('s4', 'node-a', 'default', 0, 0, 60, 3600, 3600)")
        assert b.claim("s4") is None
        mine = a.claim("s4")
        assert mine is not None and (mine.epoch, mine.generation) == (1, 0)
        assert b.claim("s4") is None
    finally:
        a.close()
        b.close()


def test_a_takeover_reads_the_session_whichever_node_holds_it(postgres_url):
    a = _leases(postgres_url, "node-a", 60)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("INSERT INTO sessions (id, node, profile, created_at, last_used_at, idle_timeout_s, ttl_s, "
                         "expires_at, kernels) VALUES ('s5', 'node-b', 'default', 1, 2, 60, 3600, 3601, '[\"python\"]')")
        row = a.session("s5")
        assert row is not None and (row.node, row.kernels, row.ttl_s) == ("node-b", ["python"], 3600)
        assert a.session("missing") is None
    finally:
        a.close()
