"""Dashboard figures of one interval, per engine and for the pool."""

from __future__ import annotations

import math

import pytest

from inference.metrics.deltas import ReadingDelta
from inference.metrics.histograms import Histogram
from inference.metrics.names import Series
from inference.metrics.readings import Counters
from inference.metrics.stats import POOL, engine_stats, pool_stats

BOUNDS = (0.1, 1.0, math.inf)


def test_engine_figures_of_an_interval() -> None:
    ttft = Histogram(BOUNDS, (0, 10, 10))
    delta = ReadingDelta(
        Counters(prefix_cache_hits=30, prefix_cache_queries=40, generation_tokens=500),
        {Series.TIME_TO_FIRST_TOKEN: ttft},
        seconds=5.0,
    )
    stats = engine_stats("e0", delta)
    assert stats.prefix_cache_hit_rate == 0.75
    assert stats.generation_tokens_per_s == 100.0
    quantiles = stats.latency[Series.TIME_TO_FIRST_TOKEN]
    assert quantiles.p50 == pytest.approx(0.55)
    assert quantiles.p99 == pytest.approx(0.991)
    assert quantiles.count == 10


def test_figures_without_anything_behind_them_are_none() -> None:
    stats = engine_stats("e0", ReadingDelta(Counters()))
    assert stats.prefix_cache_hit_rate is None
    assert stats.generation_tokens_per_s is None
    assert stats.latency == {}


def test_pool_sums_rates_ratios_and_histograms() -> None:
    a = ReadingDelta(
        Counters(prefix_cache_hits=10, prefix_cache_queries=10, generation_tokens=100),
        {Series.E2E_LATENCY: Histogram(BOUNDS, (1, 1, 1))},
        seconds=5.0,
    )
    b = ReadingDelta(
        Counters(prefix_cache_hits=0, prefix_cache_queries=30, generation_tokens=100),
        {Series.E2E_LATENCY: Histogram(BOUNDS, (0, 0, 3))},
        seconds=10.0,
    )
    pool = pool_stats([a, b, ReadingDelta(Counters())])
    assert pool.scope == POOL
    assert pool.prefix_cache_hit_rate == 0.25
    assert pool.generation_tokens_per_s == 30.0
    assert pool.latency[Series.E2E_LATENCY].count == 4
    assert pool.latency[Series.E2E_LATENCY].p99 == 1.0
