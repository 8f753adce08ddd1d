"""The drain latch and the freshness guard, on their own."""

from __future__ import annotations

from workers.core.latches import DrainLatch, Freshness


def test_the_latch_holds_through_hard_polls_and_counts_them() -> None:
    latch = DrainLatch()
    latch.set()
    assert not latch.release_if(hard=True, inflight=10, cap=100)
    assert not latch.release_if(hard=True, inflight=10, cap=100)
    assert (latch.holding, latch.suppressed) == (True, 2)


def test_the_latch_waits_for_the_pool_to_drain_under_the_cap() -> None:
    latch = DrainLatch()
    latch.set()
    assert not latch.release_if(hard=False, inflight=101, cap=100)
    assert latch.release_if(hard=False, inflight=100, cap=100)
    assert (latch.holding, latch.polls_since_release) == (False, 0)


def test_polls_since_release_start_counting_at_the_first_release() -> None:
    latch = DrainLatch()
    latch.count_poll()
    assert latch.polls_since_release is None
    latch.set()
    latch.release_if(hard=False, inflight=0, cap=1)
    latch.count_poll()
    latch.count_poll()
    assert latch.polls_since_release == 2


def test_fresh_only_after_a_complete_poll_younger_than_the_ttl() -> None:
    freshness = Freshness(ttl=15.0)
    assert not freshness.fresh(0.0)
    freshness.complete(10.0)
    assert freshness.fresh(24.9)
    assert not freshness.fresh(25.0)


def test_a_stall_freezes_once_and_a_complete_poll_thaws() -> None:
    freshness = Freshness(ttl=15.0)
    assert freshness.stalled_for(100.0) is None  # never had a complete poll: nothing to age
    freshness.complete(0.0)
    assert freshness.stalled_for(14.0) is None
    assert freshness.stalled_for(16.0) == 16.0
    assert freshness.stalled_for(30.0) is None  # already frozen: reported once
    assert not freshness.fresh(30.0)
    assert freshness.complete(31.0)
    assert not freshness.complete(36.0)


def test_freeze_reports_only_its_start() -> None:
    freshness = Freshness(ttl=15.0)
    assert freshness.freeze()
    assert not freshness.freeze()
