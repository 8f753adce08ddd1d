"""Reducing one poll's samples to pool-wide figures."""

from __future__ import annotations

import math

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.polls import PollSummary
from workers.core.samples import EngineHealth, EngineRole


def test_f15_overload_figures_read_decode_and_unified_engines_only() -> None:
    poll = PollSummary.from_samples(
        [
            sample(
                "p",
                role=EngineRole.PREFILL,
                kv=0.99,
                waiting=500,
                waiting_capacity=500,
                preemptions=7,
            ),
            sample("d", role=EngineRole.DECODE, kv=0.4, running=30),
            sample("u", role=EngineRole.UNIFIED, kv=0.5, running=20, waiting=3, waiting_capacity=1),
        ],
        at=1.0,
    )
    assert (poll.max_kv_usage, poll.running, poll.waiting_capacity, poll.preemptions) == (
        0.5,
        50,
        1,
        0,
    )
    assert poll.waiting_engines == frozenset({"u"})
    assert poll.kv_capacity_tokens == 200_000  # the prefill engine's KV does not hold episodes


def test_stale_engines_are_counted_but_their_numbers_are_not_read() -> None:
    poll = PollSummary.from_samples(
        [sample("a", health=EngineHealth.STALE, kv=0.9, running=99), sample("b", kv=0.2)], 0.0
    )
    assert (poll.fresh, poll.stale, poll.max_kv_usage, poll.running) == (1, 1, 0.2, 10)
    assert not poll.complete
    assert not poll.blind
    assert poll.kv_capacity_tokens == 200_000  # capacity is static: a stale engine keeps it


def test_down_engines_have_left_the_pool_even_for_capacity() -> None:
    poll = PollSummary.from_samples([sample("a", health=EngineHealth.DOWN), sample("b")], 0.0)
    assert (poll.down, poll.complete, poll.kv_capacity_tokens) == (1, True, 100_000)


def test_a_poll_without_a_fresh_engine_is_blind() -> None:
    poll = PollSummary.from_samples([sample(health=EngineHealth.STALE)], 0.0)
    assert poll.blind
    assert PollSummary.from_samples([], 0.0).blind


def test_engines_without_the_waiting_breakdown_count_all_waiting_as_capacity() -> None:
    poll = PollSummary.from_samples(
        [
            sample("old", waiting=4, waiting_capacity=None),
            sample("new", waiting=4, waiting_capacity=1),
        ],
        0.0,
    )
    assert poll.waiting_capacity == 5


def test_prefix_hit_rate_and_engine_requests() -> None:
    poll = PollSummary.from_samples(
        [
            sample("a", hits=30, queries=40, running=5, waiting=2),
            sample("b", hits=10, queries=60, running=5),
        ],
        0.0,
    )
    assert poll.prefix_hit_rate == pytest.approx(0.4)
    assert poll.engine_requests == 12
    assert PollSummary.from_samples([sample()], 0.0).prefix_hit_rate is None


def test_capacity_and_max_model_len_wait_until_reported() -> None:
    poll = PollSummary.from_samples([sample(capacity=None, max_model_len=None)], 0.0)
    assert (poll.kv_capacity_tokens, poll.max_model_len) == (None, None)


def test_restarted_engines_are_named_and_make_the_poll_not_whole() -> None:
    poll = PollSummary.from_samples([sample("a", restarted=True), sample("b")], 0.0)
    assert poll.restarted == frozenset({"a"})
    assert (poll.complete, poll.whole) == (True, False)
    assert PollSummary.from_samples([sample("a"), sample("b")], 0.0).whole


def test_engines_not_up_with_capacity_and_max_model_len_are_unready() -> None:
    poll = PollSummary.from_samples(
        [
            sample("up"),
            sample("stale", health=EngineHealth.STALE),
            sample("down", health=EngineHealth.DOWN),
            sample("no-kv", capacity=None),
            sample("no-len", max_model_len=None),
            sample("prefill", role=EngineRole.PREFILL, capacity=None),
        ],
        0.0,
    )
    assert poll.unready == frozenset({"stale", "down", "no-kv", "no-len"})


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ([sample("a"), sample("a")], "twice"),
        ([sample(kv=-0.1)], "kv_usage"),
        ([sample(kv=math.nan)], "kv_usage"),
        ([sample(running=-1)], "num_running"),
        ([sample(waiting_capacity=-2)], "num_waiting_capacity"),
        ([sample(tokens=-5)], "generation_tokens"),
    ],
)
def test_malformed_samples_are_refused_with_the_engine_and_field_named(samples, message) -> None:
    with pytest.raises(ValueError, match=message):
        PollSummary.from_samples(samples, 0.0)
