"""Batch summaries: counts by verdict and group; pass@k checked against a direct computation."""

import itertools
import math
import random

import pytest

from wasm_runner import ExecResult
from wasm_runner.evaluation.summary import BatchSummary, pass_at_k


def direct_pass_at_k(n, c, k):
    """pass@k by its definition: over every way to draw k of the n samples, the share with a pass."""
    samples = [True] * c + [False] * (n - c)
    draws = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in draw) for draw in draws) / len(draws)


@pytest.mark.parametrize(("n", "c", "k"), [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 1, 5), (8, 3, 4),
                                           (10, 0, 3), (10, 10, 10), (12, 5, 2)])
def test_pass_at_k_is_the_share_of_k_draws_with_a_pass(n, c, k):
    expected = direct_pass_at_k(n, c, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_pass_at_k_stays_exact_for_large_n():
    assert pass_at_k(2000, 7, 100) == pytest.approx(1 - math.comb(1993, 100) / math.comb(2000, 100), rel=1e-9)


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_summary_counts_by_verdict_and_group_and_averages_pass_at_k():
    rng = random.Random(7)
    summary = BatchSummary(ks=(1, 5))
    truth = {}
    for task in range(6):
        n = 5 + task  # every group has at least 5 samples
        c = rng.randint(0, n)
        verdicts = ["passed"] * c + rng.choices(["failed", "timeout", "error", "limit"], k=n - c)
        rng.shuffle(verdicts)
        truth[f"t{task}"] = (n, c)
        for i, verdict in enumerate(verdicts):
            summary.add(ExecResult(verdict=verdict, group=f"t{task}", id=f"{task}-{i}", cached=i == 0))
    summary.add(ExecResult(exit_code=0))  # a script item without a group
    data = summary.to_dict()
    assert data["total"] == sum(n for n, _ in truth.values()) + 1
    assert data["by_verdict"]["ok"] == 1
    assert data["by_verdict"].get("passed", 0) == sum(c for _, c in truth.values())
    assert data["by_group"]["t3"]["samples"] == truth["t3"][0] and data["by_group"]["t3"]["passed"] == truth["t3"][1]
    for k in (1, 5):
        expected = sum(direct_pass_at_k(n, c, k) for n, c in truth.values()) / len(truth)
        assert data["pass_at_k"][f"pass@{k}"] == pytest.approx(expected, abs=1e-12)
        assert data["pass_at_k"][f"groups@{k}"] == 6
    assert data["cached"] == 6
    assert "pass@1=" in summary.text() and "pass@5=" in summary.text()


def test_groups_with_fewer_samples_than_k_are_left_out():
    summary = BatchSummary(ks=(2,))
    summary.add(ExecResult(verdict="passed", group="a"))
    summary.add(ExecResult(verdict="failed", group="b"))
    summary.add(ExecResult(verdict="failed", group="b"))
    assert summary.to_dict()["pass_at_k"] == {"pass@2": 0.0, "groups@2": 1}
