"""Time for the control core, injected so that one code path runs in real and virtual time.

Production uses the monotonic clock (wall-clock jumps must never look like stalled metrics);
tests and the simulator's virtual time use ``ManualClock``, whose time moves only when told.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """What the core needs from time: a reading, and a way to wait."""

    def now(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until ``now()`` has moved on by at least ``seconds``."""
        ...


class MonotonicClock:
    """Real time: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """Time that moves only when ``advance`` is called.

    Sleepers wake when an advance reaches their deadline, in deadline order. One advance wakes
    every sleeper that is due by its end at once; a caller that needs the wake-ups in between
    to run first advances in smaller steps.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def next_deadline(self) -> float | None:
        """When the earliest sleeper wakes; None when nobody sleeps. A virtual-time driver
        reads it to know how far it may run the engines before the core has to act."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)  # a cancelled sleeper wakes nobody
        return self._sleepers[0][0] if self._sleepers else None

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), waiter))
        await waiter

    def advance(self, seconds: float) -> None:
        """Move time forward and wake the sleepers that are due."""
        if seconds < 0:
            raise ValueError(f"time only moves forward; advance got {seconds} s (must be >= 0)")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)
