"""Warning records: cap above the batch limit (F13), restarts, persistent waiters (F17)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inference.metrics.endpoints import EngineSpec
from inference.metrics.warnings import (
    WarningConfig,
    WarningKind,
    WarningTracker,
    batch_limit_warning,
)
from workers.core.samples import EngineHealth, EngineRole, LoadSample


def sample(engine_id: str = "e", **changes: object) -> LoadSample:
    base = LoadSample(
        engine_id=engine_id,
        role=EngineRole.DECODE,
        scraped_at=0.0,
        health=EngineHealth.UP,
        kv_capacity_tokens=8192,
        max_model_len=2048,
        kv_usage=0.5,
        num_running=8,
        num_waiting=0,
        num_waiting_capacity=0,
        num_preemptions=0,
        prefix_cache_hits=0,
        prefix_cache_queries=0,
        generation_tokens=0,
    )
    return replace(base, **changes)


SPECS = [
    EngineSpec("a", "http://a:1", EngineRole.DECODE, max_num_seqs=128),
    EngineSpec("b", "http://b:1", EngineRole.DECODE, max_num_seqs=128),
    EngineSpec("p", "http://p:1", EngineRole.PREFILL, max_num_seqs=512),
]
SAMPLES = [sample("a"), sample("b"), sample("p", role=EngineRole.PREFILL)]


def test_cap_above_the_decode_engines_batch_limit_warns_with_its_numbers() -> None:
    warning = batch_limit_warning(300, SAMPLES, SPECS, now=12.0)
    assert warning is not None
    assert warning.kind is WarningKind.CAP_ABOVE_BATCH_LIMIT
    assert warning.figures == {"cap": 300, "batch_limit": 256, "engines": 2}
    assert warning.at == 12.0


def test_cap_within_the_batch_limit_is_quiet() -> None:
    assert batch_limit_warning(256, SAMPLES, SPECS, now=0.0) is None


def test_data_parallel_ranks_each_count_their_endpoints_limit() -> None:
    ranks = [sample("a/0"), sample("a/1")]
    assert batch_limit_warning(256, ranks, SPECS, now=0.0) is None
    assert batch_limit_warning(257, ranks, SPECS, now=0.0) is not None


def test_an_unknown_limit_is_never_guessed() -> None:
    specs = [*SPECS[:1], EngineSpec("b", "http://b:1", EngineRole.DECODE)]
    assert batch_limit_warning(10_000, SAMPLES[:2], specs, now=0.0) is None


def test_a_restarted_engine_warns_once_per_poll_that_saw_it() -> None:
    tracker = WarningTracker()
    warnings = tracker.observe([sample(restarted=True), sample("other")], now=5.0)
    assert [(w.kind, w.engine_id) for w in warnings] == [(WarningKind.ENGINE_RESTART, "e")]


def test_capacity_waiters_that_persist_warn_once_when_they_cross_the_bound() -> None:
    tracker = WarningTracker(WarningConfig(capacity_wait_bound_s=60.0))
    waiting = sample(num_waiting=2, num_waiting_capacity=2)
    found = [tracker.observe([waiting], now=float(t)) for t in range(0, 100, 5)]
    crossed = [i * 5 for i, warnings in enumerate(found) if warnings]
    assert crossed == [60]
    (warning,) = found[12]
    assert warning.kind is WarningKind.CAPACITY_WAITERS_PERSIST
    assert warning.figures["waiting_capacity"] == 2


def test_a_poll_without_waiters_ends_the_stretch() -> None:
    tracker = WarningTracker(WarningConfig(capacity_wait_bound_s=10.0))
    waiting = sample(num_waiting=1, num_waiting_capacity=1)
    tracker.observe([waiting], now=0.0)
    tracker.observe([sample()], now=5.0)
    assert tracker.observe([waiting], now=10.0) == ()
    assert tracker.observe([waiting], now=20.0) != ()


def test_deferred_waiters_do_not_count_but_all_waiters_do_without_a_breakdown() -> None:
    tracker = WarningTracker(WarningConfig(capacity_wait_bound_s=10.0))
    deferred_only = sample(num_waiting=3, num_waiting_capacity=0)
    no_breakdown = sample("old", num_waiting=3, num_waiting_capacity=None)
    tracker.observe([deferred_only, no_breakdown], now=0.0)
    warnings = tracker.observe([deferred_only, no_breakdown], now=10.0)
    assert [(w.engine_id, w.figures["waiting_capacity"]) for w in warnings] == [("old", 3)]


def test_stale_samples_and_prefill_queues_never_warn() -> None:
    tracker = WarningTracker(WarningConfig(capacity_wait_bound_s=10.0))
    stale = sample(num_waiting=1, num_waiting_capacity=1, health=EngineHealth.STALE)
    prefill = sample("p", role=EngineRole.PREFILL, num_waiting=9, num_waiting_capacity=9)
    for t in (0.0, 10.0, 20.0):
        assert tracker.observe([stale, prefill], now=t) == ()


def test_config_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity_wait_bound_s"):
        WarningConfig(capacity_wait_bound_s=0.0)
