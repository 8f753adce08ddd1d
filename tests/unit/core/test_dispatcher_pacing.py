"""Admission pacing in the dispatcher: a tenth of the cap per window, refunds for natural
completions, credits that fit the room, and the demand the controller's growth reads."""

from __future__ import annotations

import pytest

from tests.unit.core.dispatch_harness import Harness, MakeHarness
from workers.core.dispatch.records import DispatcherConfig


async def paced_at_100(make: MakeHarness) -> Harness:
    """Thirty groups queued under a paced cap of 100: the first window admits 10."""
    h = make(cap=100, config=DispatcherConfig())
    for n in range(30):
        h.submit(f"g{n}")
    await h.settle()
    assert h.inflight == 10
    return h


async def test_pacing_allows_a_tenth_of_the_cap_net_per_window(make: MakeHarness) -> None:
    h = await paced_at_100(make)
    await h.advance(4.9)
    assert h.inflight == 10
    await h.advance(0.1)  # the window slid: the dispatcher's own timer refills
    assert h.inflight == 20


async def test_demand_is_the_pool_after_one_window_of_the_queued_work(make: MakeHarness) -> None:
    h = await paced_at_100(make)
    assert h.dispatcher.demand == 20  # 10 in flight, and the next window's 10 of 110 queued
    alone = make(cap=100, config=DispatcherConfig())
    alone.submit("g0")
    await alone.settle()
    assert alone.dispatcher.demand == 4  # nothing more queued: the pool is all the work


async def test_a_natural_completion_refunds_its_admission_but_a_cancellation_does_not(
    make: MakeHarness,
) -> None:
    h = await paced_at_100(make)
    h.engines.finish("g0", 0, 1)
    await h.settle()
    assert h.inflight == 10  # both replaced at once
    report = h.dispatcher.shed(4)
    await h.settle()
    assert report.cancelled == 4
    assert h.inflight == 6  # nothing replaced the shed episodes
    assert (h.dispatcher.stats().pacing_paid, h.dispatcher.stats().pacing_credits) == (10, 0)


async def test_slots_another_run_freed_are_taken_over_unpaced_within_the_room(
    make: MakeHarness,
) -> None:
    h = await paced_at_100(make)  # the window's budget spent
    assert h.dispatcher.take_over(25) == 25  # a run of lower priority freed 25 slots
    await h.settle()
    assert h.inflight == 35
    h.dispatcher.set_cap(40)
    assert h.dispatcher.take_over(500) == 5  # never past the cap: the rest is the caller's
    await h.settle()
    assert (h.inflight, h.dispatcher.stats().pacing_credits) == (40, 0)
    with pytest.raises(ValueError, match="take_over count must be >= 0"):
        h.dispatcher.take_over(-1)


async def test_f16_refill_after_a_barrier_reaches_the_cap_in_one_go(make: MakeHarness) -> None:
    h = make(cap=64, config=DispatcherConfig())
    for n in range(16):
        h.submit(f"a{n}")
    for _ in range(10):
        await h.advance(5.0)
    assert h.inflight == 64
    for n in range(16):
        h.engines.finish(f"a{n}", 0, 1, 2, 3)
    await h.settle()
    assert h.inflight == 0  # the barrier: the step waits for the trainer
    for n in range(16):
        h.submit(f"b{n}")
    assert h.inflight == 64  # same instant, no clock advance: all 16 groups at once


async def full_at_100(make: MakeHarness, groups: int) -> Harness:
    """``groups`` of four queued under a paced cap of 100, run until the pool is full and the
    last paid admissions have left the window."""
    h = make(cap=100, config=DispatcherConfig())
    for n in range(groups):
        h.submit(f"g{n}")
    for _ in range(10):
        await h.advance(5.0)
    assert h.inflight == 100
    await h.advance(5.0)  # the last paid admissions left the window
    return h


async def test_completions_above_the_cap_bank_no_credit_for_a_later_raise(
    make: MakeHarness,
) -> None:
    h = await full_at_100(make, groups=40)
    h.dispatcher.set_cap(50)
    for n in range(12):
        h.engines.finish(f"g{n}", 0, 1, 2, 3)
    h.engines.finish("g12", 0, 1)
    await h.settle()
    assert h.inflight == 50  # drained to the cap: none of these slots was refilled
    h.dispatcher.set_cap(100)
    await h.settle()
    assert h.inflight == 60  # one window's budget, not a burst paid by those 50 completions


async def test_credits_banked_with_an_empty_queue_do_not_outlive_their_slots(
    make: MakeHarness,
) -> None:
    """Completions with nothing queued bank credits for slots that a cut then takes away;
    kept, they would pay for a burst when the cap rose again."""
    h = await full_at_100(make, groups=25)
    for n in range(10):
        h.engines.finish(f"g{n}", 0, 1, 2, 3)
    await h.settle()
    assert (h.inflight, h.dispatcher.stats().pacing_credits) == (60, 40)  # nothing queued
    h.dispatcher.set_cap(50)
    for n in range(100, 140):
        h.submit(f"g{n}")
    for n in range(10, 25):  # 60 ordinary completions, the first 10 above the cap
        h.engines.finish(f"g{n}", 0, 1, 2, 3)
        await h.settle()
    assert h.inflight == 50
    h.dispatcher.set_cap(100)
    await h.settle()
    assert h.inflight == 60  # one window's budget of 10, not 50 at once
