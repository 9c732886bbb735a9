"""A batch's summary: counts by verdict and by group, and pass@k over the samples of each group."""

from __future__ import annotations

from collections import Counter
from typing import Any

from wasm_runner_protocol.execution import ExecResult

__all__ = ["BatchSummary", "outcome_of", "pass_at_k"]


def outcome_of(result: ExecResult) -> str:
    """The word a result is counted under: its verdict, else ok / error / limit:<name>."""
    if result.verdict is not None:
        return result.verdict
    if result.limit is not None:
        return f"limit:{result.limit}"
    return "ok" if result.exit_code == 0 and result.error is None else "error"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k),
    as a product (the binomials overflow floats for large n)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    missed = 1.0
    for i in range(n - c + 1, n + 1):
        missed *= 1.0 - k / i
    return 1.0 - missed


class BatchSummary:
    """Counts results as they come (constant memory per group, not per item)."""

    def __init__(self, ks: tuple[int, ...] = (1,)) -> None:
        self.ks = tuple(sorted(set(ks)))
        self.by_outcome: Counter[str] = Counter()
        self.groups: dict[str, Counter[str]] = {}
        self.total = 0
        self.cached = 0
        self.retried = 0

    def add(self, result: ExecResult, outcome: str | None = None) -> None:
        outcome = outcome or outcome_of(result)
        self.total += 1
        self.by_outcome[outcome] += 1
        self.cached += result.cached
        self.retried += result.retried
        if result.group is not None:
            self.groups.setdefault(result.group, Counter())[outcome] += 1

    def pass_at(self) -> dict[str, Any]:
        """pass@k for each k: the mean over the groups with at least k samples (and how many those are)."""
        out: dict[str, Any] = {}
        for k in self.ks:
            values = [pass_at_k(sum(g.values()), g["passed"], k) for g in self.groups.values() if sum(g.values()) >= k]
            out[f"pass@{k}"] = sum(values) / len(values) if values else None
            out[f"groups@{k}"] = len(values)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_verdict": dict(sorted(self.by_outcome.items())),
            "by_group": {name: {"samples": sum(g.values()), "passed": g["passed"], "by_verdict": dict(sorted(g.items()))}
                         for name, g in sorted(self.groups.items())},
            "pass_at_k": self.pass_at() if self.groups else {},
            "cached": self.cached,
            "retried": self.retried,
        }

    def text(self) -> str:
        """The end summary a person reads (one line per topic)."""
        lines = [f"{self.total} items: " + " ".join(f"{k}={v}" for k, v in sorted(self.by_outcome.items()))]
        if self.groups:
            passed = sum(1 for g in self.groups.values() if g["passed"])
            lines.append(f"{len(self.groups)} groups, {passed} with at least one pass")
            lines.append(" ".join(f"pass@{k}={v:.4f}" if isinstance(v, float) else f"pass@{k}=n/a"
                                  for k, v in ((k, self.pass_at()[f"pass@{k}"]) for k in self.ks)))
        if self.cached or self.retried:
            lines.append(f"cached={self.cached} retried={self.retried}")
        return "\n".join(lines)
