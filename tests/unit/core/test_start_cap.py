"""The start cap: given, or derived once the whole pool reports, or after a bounded wait."""

from __future__ import annotations

from tests.unit.core.builders import sample
from workers.core.controller.polls import PollSummary
from workers.core.controller.records import ControllerConfig
from workers.core.controller.start_cap import StartCap
from workers.core.samples import EngineHealth, EngineRole


def poll(*samples, at: float = 0.0) -> PollSummary:
    return PollSummary.from_samples(samples, at)


def test_a_given_start_needs_no_report() -> None:
    start = StartCap(ControllerConfig(initial_inflight=64))
    assert start.derive(poll(sample(capacity=None), at=0.0), 0.0) == (64.0, "initial_inflight 64")


def test_derived_as_kv_tokens_over_the_smaller_of_max_len_and_token_budget() -> None:
    start = StartCap(ControllerConfig(episode_token_budget=3_000))
    derived = start.derive(poll(sample(capacity=90_000, max_model_len=8_000)), 0.0)
    assert derived == (30.0, "KV 90000 tokens / 3000 tokens per episode")


def test_it_waits_for_every_decode_engine_and_ignores_prefill_ones() -> None:
    start = StartCap(ControllerConfig(start_wait=60.0))
    prefill = sample("p", role=EngineRole.PREFILL, health=EngineHealth.DOWN, capacity=None)
    no_length = sample("d1", role=EngineRole.DECODE, max_model_len=None)
    assert start.derive(poll(sample("d0", role=EngineRole.DECODE), no_length, prefill), 0.0) is None
    both = poll(sample("d0", role=EngineRole.DECODE), sample("d1", role=EngineRole.DECODE), prefill)
    assert start.derive(both, 5.0) == (200.0, "KV 200000 tokens / 1000 tokens per episode")


def test_after_the_wait_it_settles_for_the_engines_that_report_and_names_the_rest() -> None:
    start = StartCap(ControllerConfig(start_wait=60.0))
    partial = poll(sample("a"), sample("b", health=EngineHealth.DOWN, capacity=None))
    assert start.derive(partial, 100.0) is None  # the wait runs from the first poll seen
    assert start.derive(partial, 159.9) is None
    level, detail = start.derive(partial, 160.0) or (0.0, "")
    assert (level, detail) == (
        100.0,
        "KV 100000 tokens / 1000 tokens per episode; after 60 s still without b",
    )


def test_no_capacity_reported_at_all_waits_even_after_the_wait() -> None:
    start = StartCap(ControllerConfig(start_wait=0.0))
    assert start.derive(poll(sample(capacity=None)), 0.0) is None
    assert start.derive(poll(sample(max_model_len=None)), 10.0) is None
