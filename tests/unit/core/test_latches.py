"""The drain latch and the freshness guard, on their own."""

from __future__ import annotations

from workers.core.controller.latches import DrainLatch, Freshness


def test_the_latch_holds_through_hard_polls_and_counts_them() -> None:
    latch = DrainLatch()
    latch.set()
    assert latch.release(complete=True, hard=True, inflight=10, cap=100) is None
    assert latch.release(complete=True, hard=True, inflight=10, cap=100, shadow=True) is None
    assert (latch.holding, latch.suppressed) == (True, 2)


def test_the_latch_waits_for_the_pool_to_drain_under_the_cap() -> None:
    latch = DrainLatch()
    latch.set()
    assert latch.release(complete=True, hard=False, inflight=101, cap=100) is None
    assert (
        latch.release(complete=True, hard=False, inflight=100, cap=100)
        == "pool 100 <= cap 100, no overload"
    )
    assert (latch.holding, latch.polls_since_release) == (False, 0)


def test_a_shadow_cap_is_judged_on_the_pool_it_would_have_had() -> None:
    latch = DrainLatch()
    latch.set()
    detail = latch.release(complete=True, hard=False, inflight=200, cap=80, shadow=True)
    assert detail == "pool 80 <= cap 80 (the pool the policy would have had), no overload"
    assert not latch.holding


def test_polls_since_release_start_counting_at_the_first_release() -> None:
    latch = DrainLatch()
    latch.count_poll()
    assert latch.polls_since_release is None
    latch.set()
    latch.release(complete=True, hard=False, inflight=0, cap=1)
    latch.count_poll()
    latch.count_poll()
    assert latch.polls_since_release == 2


def test_fresh_only_after_a_complete_poll_younger_than_the_ttl() -> None:
    freshness = Freshness(ttl=15.0)
    assert not freshness.fresh(0.0)
    freshness.complete(10.0)
    assert freshness.fresh(24.9)
    assert not freshness.fresh(25.0)


def test_a_stall_is_aged_from_the_last_complete_poll_or_else_from_the_start() -> None:
    freshness = Freshness(ttl=15.0)
    assert not freshness.stalled(1e9)  # the clock has not started
    freshness.start(100.0)
    freshness.start(105.0)  # only the first start counts
    assert not freshness.stalled(114.0)
    assert freshness.stalled(115.0)  # never a complete poll: aged from the start
    assert freshness.stalled(115.0)  # a query: asking changes nothing
    assert not freshness.fresh(110.0)  # the start is no complete poll
    freshness.complete(120.0)
    assert not freshness.stalled(134.0)
    assert freshness.freeze_if_stalled(136.0) == "no complete poll for 16.0 s (ttl 15 s)"


def test_a_stall_is_reported_once_and_a_complete_poll_thaws() -> None:
    freshness = Freshness(ttl=15.0, since=0.0)
    assert freshness.freeze_if_stalled(14.0) is None
    assert freshness.freeze_if_stalled(16.0) is not None
    assert (freshness.frozen, freshness.freeze_if_stalled(30.0)) == (True, None)  # reported once
    assert not freshness.fresh(30.0)
    assert freshness.complete(31.0)
    assert freshness.fresh(31.0)
    assert not freshness.complete(36.0)


def test_freeze_reports_only_its_start() -> None:
    freshness = Freshness(ttl=15.0)
    assert freshness.freeze()
    assert not freshness.freeze()


def test_a_cap_still_overloaded_after_stuck_polls_hard_polls_at_the_cap_releases() -> None:
    latch = DrainLatch()
    latch.set()
    assert (
        latch.release(complete=True, hard=True, inflight=90, cap=80, stuck_polls=3) is None
    )  # not drained
    assert latch.release(complete=True, hard=True, inflight=80, cap=80, stuck_polls=3) is None
    assert latch.release(complete=True, hard=True, inflight=80, cap=80, stuck_polls=3) is None
    detail = latch.release(complete=True, hard=True, inflight=79, cap=80, stuck_polls=3)
    assert detail == "pool 79 <= cap 80 for 3 polls, still overloaded: the cap itself is too high"
    assert (latch.holding, latch.polls_since_release) == (False, 0)


def test_the_stuck_count_restarts_when_the_pool_rises_above_the_cap() -> None:
    latch = DrainLatch()
    latch.set()
    for inflight in (80, 80, 81, 80, 80):
        assert (
            latch.release(complete=True, hard=True, inflight=inflight, cap=80, stuck_polls=3)
            is None
        )
    assert latch.holding


def test_stuck_polls_zero_keeps_the_reference_latch_exactly() -> None:
    latch = DrainLatch()
    latch.set()
    for _ in range(100):
        assert latch.release(complete=True, hard=True, inflight=10, cap=80, stuck_polls=0) is None
    assert latch.holding


def test_the_latch_never_releases_on_an_incomplete_poll() -> None:
    latch = DrainLatch()
    latch.set()
    assert latch.release(complete=False, hard=False, inflight=10, cap=100) is None
    assert latch.holding
