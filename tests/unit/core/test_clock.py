"""Clocks: real monotonic time and hand-driven time."""

from __future__ import annotations

import asyncio

import pytest

from workers.core.clock import ManualClock, MonotonicClock


async def test_manual_clock_wakes_sleepers_when_time_reaches_their_deadline() -> None:
    clock = ManualClock(start=100.0)
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in [("late", 10.0), ("early", 2.0)]]
    await asyncio.sleep(0)
    clock.advance(1.9)
    await asyncio.sleep(0)
    assert woke == []
    clock.advance(0.1)
    await asyncio.sleep(0)
    assert woke == ["early"]
    clock.advance(8.0)
    await asyncio.gather(*tasks)
    assert woke == ["early", "late"]
    assert clock.now() == 110.0


async def test_a_cancelled_sleeper_is_skipped_and_the_others_still_wake() -> None:
    clock = ManualClock()
    cancelled = asyncio.create_task(clock.sleep(5.0))
    kept = asyncio.create_task(clock.sleep(5.0))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    clock.advance(10.0)  # waking a cancelled sleeper's future would raise InvalidStateError
    await asyncio.wait_for(kept, timeout=1.0)
    assert (cancelled.cancelled(), kept.done()) == (True, True)


async def test_next_deadline_is_the_earliest_live_sleeper() -> None:
    clock = ManualClock(start=10.0)
    assert clock.next_deadline() is None
    early = asyncio.create_task(clock.sleep(2.0))
    late = asyncio.create_task(clock.sleep(5.0))
    await asyncio.sleep(0)
    assert clock.next_deadline() == 12.0
    early.cancel()
    await asyncio.gather(early, return_exceptions=True)
    assert clock.next_deadline() == 15.0  # a cancelled sleeper is no deadline
    clock.advance(5.0)
    await late
    assert clock.next_deadline() is None


async def test_a_zero_sleep_only_yields() -> None:
    clock = ManualClock()
    await clock.sleep(0.0)
    assert clock.now() == 0.0


def test_manual_time_never_goes_back() -> None:
    with pytest.raises(ValueError, match="forward"):
        ManualClock().advance(-1.0)


async def test_monotonic_clock_moves_forward_across_a_sleep() -> None:
    clock = MonotonicClock()
    before = clock.now()
    await clock.sleep(0.01)
    assert clock.now() - before >= 0.009
