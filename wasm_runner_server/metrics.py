"""Prometheus metrics in the text exposition format (version 0.0.4), without a dependency.

Counters and histograms are owned by one `Metrics` object per application (no
module-level registry); gauges are read from the live service when scraped.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class Counter:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = ()) -> None:
        self.name, self.help, self.label_names = name, help, labels
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self._values[labels] = self._values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self._values.get(labels, 0.0)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for labels, value in sorted(self._values.items()):
            yield f"{self.name}{_labels(self.label_names, labels)} {_number(value)}"


class Histogram:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.name, self.help, self.label_names = name, help, labels
        self.buckets = tuple(sorted(buckets))
        self._series: dict[tuple[str, ...], list] = {}

    def observe(self, value: float, *labels: str) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [[0] * len(self.buckets), 0.0, 0]
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.buckets):
            series[0][index] += 1
        series[1] += value
        series[2] += 1

    def count(self, *labels: str) -> int:
        series = self._series.get(labels)
        return series[2] if series else 0

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for labels, (counts, total, n) in sorted(self._series.items()):
            cumulative = 0
            for bound, count in zip(self.buckets, counts, strict=True):
                cumulative += count
                le = 'le="' + _number(bound) + '"'
                yield f"{self.name}_bucket{_labels(self.label_names, labels, le)} {cumulative}"
            yield f"{self.name}_bucket{_labels(self.label_names, labels, 'le=' + chr(34) + '+Inf' + chr(34))} {n}"
            yield f"{self.name}_sum{_labels(self.label_names, labels)} {_number(total)}"
            yield f"{self.name}_count{_labels(self.label_names, labels)} {n}"


class Gauge:
    """A value read when scraped."""

    def __init__(self, name: str, help: str, read: Callable[[], float]) -> None:
        self.name, self.help, self.read = name, help, read

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        yield f"{self.name} {_number(self.read())}"


class Family:
    """Labelled values read when scraped (a counter or gauge kept by another part, e.g. the
    worker supervisor)."""

    def __init__(self, name: str, help: str, kind: str, labels: tuple[str, ...],
                 read: Callable[[], dict[tuple[str, ...], float]]) -> None:
        self.name, self.help, self.kind, self.label_names, self.read = name, help, kind, labels, read

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} {self.kind}"
        for labels, value in sorted(self.read().items()):
            yield f"{self.name}{_labels(self.label_names, labels)} {_number(value)}"


class Metrics:
    """The service's metrics; gauges are registered by the parts that know the values."""

    def __init__(self) -> None:
        self.executions = Counter(
            "wasm_runner_executions_total", "Executions by language, mode, outcome (ok, error, limit, cancelled, "
            "rejected) and the limit that stopped them.", ("language", "mode", "outcome", "limit"))
        self.execution_seconds = Histogram(
            "wasm_runner_execution_duration_seconds", "Wall time of executions, queueing excluded.",
            ("language", "mode"))
        self.queue_wait_seconds = Histogram(
            "wasm_runner_execution_queue_wait_seconds", "Time executions waited for a slot.")
        self.http_requests = Counter(
            "wasm_runner_http_requests_total", "HTTP requests by method, route and status.", ("method", "route", "status"))
        self.http_seconds = Histogram(
            "wasm_runner_http_request_duration_seconds", "HTTP request latency by method and route.", ("method", "route"))
        self.sessions_hibernated = Counter("wasm_runner_sessions_hibernated_total", "Kernels dropped after idling.")
        self.sessions_expired = Counter("wasm_runner_sessions_expired_total", "Sessions removed at the end of their TTL.")
        self.gauges: list[Gauge | Family | Counter | Histogram] = []
        """Metrics the parts of the service register: gauges read when scraped, and counters of their own."""

    def gauge(self, name: str, help: str, read: Callable[[], float]) -> None:
        self.gauges.append(Gauge(name, help, read))

    def family(self, name: str, help: str, kind: str, labels: tuple[str, ...],
               read: Callable[[], dict[tuple[str, ...], float]]) -> None:
        self.gauges.append(Family(name, help, kind, labels, read))

    def render(self) -> str:
        lines: list[str] = []
        for metric in (self.executions, self.execution_seconds, self.queue_wait_seconds, self.http_requests,
                       self.http_seconds, self.sessions_hibernated, self.sessions_expired, *self.gauges):
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
