"""Histograms count like Prometheus: a value on a bound falls in that bucket."""

from __future__ import annotations

import pytest

from inference.sim.stats import EngineCounters, Histogram


def test_histogram_buckets_are_less_or_equal_and_cumulative() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(0.1, 2), (1.0, 4), (float("inf"), 5)]
    assert histogram.count == 5 and histogram.sum == pytest.approx(8.65)


def test_counters_start_at_zero_with_vllm_buckets() -> None:
    counters = EngineCounters()
    assert counters.time_to_first_token.bounds[0] == 0.001
    assert counters.e2e_request_latency.bounds[-1] == 7680.0
    assert set(counters.request_success.values()) == {0}
