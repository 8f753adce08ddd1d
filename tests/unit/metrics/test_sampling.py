"""Readings and deltas into the controller's LoadSample."""

from __future__ import annotations

from inference.metrics.deltas import ReadingDelta
from inference.metrics.endpoints import EngineSpec
from inference.metrics.readings import Counters, EngineReading
from inference.metrics.sampling import load_sample, stale_sample, unreached_sample
from workers.core.samples import EngineHealth, EngineRole

SPEC = EngineSpec("d", "http://d:8000", EngineRole.DECODE)
READING = EngineReading(0.4, 12, 5, 4, 1, 65536, Counters(9, 9, 9, 9, 9))


def test_a_fresh_sample_takes_gauges_from_the_reading_and_counts_from_the_delta() -> None:
    delta = ReadingDelta(Counters(2, 30, 40, 500, 60), seconds=5.0)
    sample = load_sample("d", SPEC, 10.0, READING, delta, 8192)
    assert (sample.role, sample.health) == (EngineRole.DECODE, EngineHealth.UP)
    assert sample.scraped_at == 10.0
    assert (sample.kv_usage, sample.num_running, sample.num_waiting) == (0.4, 12, 5)
    assert (sample.num_waiting_capacity, sample.kv_capacity_tokens, sample.max_model_len) == (
        4,
        65536,
        8192,
    )
    assert (
        sample.num_preemptions,
        sample.prefix_cache_hits,
        sample.prefix_cache_queries,
        sample.generation_tokens,
    ) == (2, 30, 40, 60)


def test_a_stale_sample_keeps_gauges_and_their_time_but_zeroes_deltas() -> None:
    delta = ReadingDelta(Counters(2, 30, 40, 500, 60), seconds=5.0, restarted=True)
    fresh = load_sample("d", SPEC, 10.0, READING, delta, None)
    stale = stale_sample(fresh, EngineHealth.STALE, 4096)
    assert (stale.health, stale.scraped_at, stale.kv_usage, stale.num_running) == (
        EngineHealth.STALE,
        10.0,
        0.4,
        12,
    )
    assert (stale.num_preemptions, stale.generation_tokens, stale.restarted) == (0, 0, False)
    assert stale.max_model_len == 4096


def test_an_unreached_engine_has_no_capacity_and_the_health_it_is_given() -> None:
    sample = unreached_sample(SPEC, 3.0, EngineHealth.DOWN, None)
    assert (sample.engine_id, sample.health) == ("d", EngineHealth.DOWN)
    assert sample.kv_capacity_tokens is None
    assert not sample.is_fresh
