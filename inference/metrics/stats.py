"""Dashboard figures of one poll interval, per engine and for the pool. Pure.

These are for people, not for the controller: the prefix-cache hit rate (its collapse is the
first sign of the KV cliff), generation throughput, and latency quantiles of the interval.
A figure with nothing behind it (no queries, no finished requests, no earlier scrape) is None
rather than zero, so a panel shows a gap instead of a false "0 %".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inference.metrics.deltas import ReadingDelta
from inference.metrics.histograms import Histogram, merge
from inference.metrics.names import Series

POOL = "pool"  # the scope name of figures summed over every engine that reported
LATENCY_SERIES = (Series.TIME_TO_FIRST_TOKEN, Series.E2E_LATENCY, Series.QUEUE_TIME)


@dataclass(frozen=True, slots=True)
class Quantiles:
    """Latency quantiles in seconds over the observations made in the poll interval."""

    p50: float
    p90: float
    p99: float
    count: int  # observations behind the quantiles


@dataclass(frozen=True, slots=True)
class DashboardStats:
    scope: str  # an engine id, or POOL
    prefix_cache_hit_rate: float | None  # hit tokens / queried tokens
    generation_tokens_per_s: float | None
    latency: Mapping[Series, Quantiles] = field(default_factory=dict)


def engine_stats(engine_id: str, delta: ReadingDelta) -> DashboardStats:
    counters = delta.counters
    return DashboardStats(
        engine_id,
        _ratio(counters.prefix_cache_hits, counters.prefix_cache_queries),
        _generation_rate(delta),
        _latency(delta.histograms),
    )


def pool_stats(deltas: Sequence[ReadingDelta]) -> DashboardStats:
    """Figures over the engines that reported this poll; each rate uses its own interval."""
    rates = [rate for rate in map(_generation_rate, deltas) if rate is not None]
    merged: dict[Series, Histogram] = {}
    for series in LATENCY_SERIES:
        pooled = merge(d.histograms[series] for d in deltas if series in d.histograms)
        if pooled is not None:
            merged[series] = pooled
    return DashboardStats(
        POOL,
        _ratio(
            sum(d.counters.prefix_cache_hits for d in deltas),
            sum(d.counters.prefix_cache_queries for d in deltas),
        ),
        sum(rates) if rates else None,
        _latency(merged),
    )


def _generation_rate(delta: ReadingDelta) -> float | None:
    if delta.seconds is None:
        return None
    return delta.counters.generation_tokens / delta.seconds


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def _latency(histograms: Mapping[Series, Histogram]) -> dict[Series, Quantiles]:
    figures = {}
    for series in LATENCY_SERIES:
        hist = histograms.get(series)
        if hist is None:
            continue
        p50, p90, p99 = (hist.quantile(q) for q in (0.5, 0.9, 0.99))
        if p50 is not None and p90 is not None and p99 is not None:
            figures[series] = Quantiles(p50, p90, p99, round(hist.count))
    return figures
