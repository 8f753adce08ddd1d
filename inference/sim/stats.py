"""The engine's cumulative counters and latency histograms, as plain numbers.

These are what vLLM's Prometheus logger accumulates, kept here as data so that the virtual-
time engine pays a few integer additions per step and nothing for Prometheus; the
``metrics`` module reads them only when ``/metrics`` is scraped. Bucket bounds are vLLM's
defaults, so histograms from the simulator and from a real engine can be compared bucket by
bucket.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from inference.sim.request import FinishReason

# vLLM's default bounds (vllm/v1/metrics/buckets.py); +Inf is implicit.
TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    """Counts per bucket (the last is +Inf, not cumulative) and the sum of observations."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": a value on a bound counts in it.
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), ending with +Inf."""
        total = 0
        rows = []
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            total += count
            rows.append((bound, total))
        return rows


@dataclass(slots=True)
class EngineCounters:
    """Totals since the engine started; Prometheus counters are exactly these."""

    num_preemptions: int = 0
    prefix_cache_queries: int = 0  # tokens looked up by newly admitted requests
    prefix_cache_hits: int = 0  # of which found cached
    prompt_tokens: int = 0  # prompt tokens of requests that produced their first token
    generation_tokens: int = 0
    request_success: dict[FinishReason, int] = field(
        default_factory=lambda: dict.fromkeys(FinishReason, 0)
    )
    time_to_first_token: Histogram = field(
        default_factory=lambda: Histogram(TIME_TO_FIRST_TOKEN_BUCKETS)
    )
    e2e_request_latency: Histogram = field(
        default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS)
    )
    request_queue_time: Histogram = field(
        default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS)
    )
