"""One engine's reading and deltas into the controller's load sample. Pure."""

from __future__ import annotations

from dataclasses import replace

from inference.metrics.deltas import ReadingDelta
from inference.metrics.endpoints import EngineSpec
from inference.metrics.readings import EngineReading
from workers.core.samples import EngineHealth, LoadSample


def load_sample(
    engine_id: str,
    spec: EngineSpec,
    at: float,
    reading: EngineReading,
    delta: ReadingDelta,
    max_model_len: int | None,
) -> LoadSample:
    counters = delta.counters
    return LoadSample(
        engine_id=engine_id,
        role=spec.role,
        scraped_at=at,
        health=EngineHealth.UP,
        kv_capacity_tokens=reading.kv_capacity_tokens,
        max_model_len=max_model_len,
        kv_usage=reading.kv_usage,
        num_running=reading.num_running,
        num_waiting=reading.num_waiting,
        num_waiting_capacity=reading.num_waiting_capacity,
        num_preemptions=round(counters.preemptions),
        prefix_cache_hits=round(counters.prefix_cache_hits),
        prefix_cache_queries=round(counters.prefix_cache_queries),
        generation_tokens=round(counters.generation_tokens),
        restarted=delta.restarted,
    )


def stale_sample(last: LoadSample, health: EngineHealth, max_model_len: int | None) -> LoadSample:
    """The last good gauges of an engine without fresh numbers, with zero deltas.

    Its ``scraped_at`` stays the time of those gauges, so their age is plain to see.
    """
    return replace(
        last,
        health=health,
        max_model_len=max_model_len,
        num_preemptions=0,
        prefix_cache_hits=0,
        prefix_cache_queries=0,
        generation_tokens=0,
        restarted=False,
    )


def unreached_sample(
    spec: EngineSpec, now: float, state: EngineHealth, max_model_len: int | None
) -> LoadSample:
    """An engine never scraped: no numbers at all, so zeros under a health that says so.

    ``scraped_at`` is the poll's time because there is no scrape to date it by.
    """
    return LoadSample(
        engine_id=spec.name,
        role=spec.role,
        scraped_at=now,
        health=state,
        kv_capacity_tokens=None,
        max_model_len=max_model_len,
        kv_usage=0.0,
        num_running=0,
        num_waiting=0,
        num_waiting_capacity=None,
        num_preemptions=0,
        prefix_cache_hits=0,
        prefix_cache_queries=0,
        generation_tokens=0,
    )
