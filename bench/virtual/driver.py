"""One virtual clock for the control core and every simulated engine.

The core runs as it does in production, as asyncio tasks on an injected clock (here a
``ManualClock``); the engines run in ``VirtualEngine`` time. The driver alternates the two,
conservatively, so that nothing ever happens out of order:

1. let every task that can run, run (``settle``): the core reacts to what just happened,
   and its submissions reach the engines at the current virtual time;
2. find the next thing that will happen: the earliest clock sleeper (a poll, an environment's
   latency, a pacing timer), a finished request not yet delivered, a timed event, the end;
3. run the busy engine whose clock is earliest up to its next finished request, never
   starting a step at or after that time. Finished requests wait in a heap, in time order;
4. when no busy engine can start a step before the next thing, move the clock there and
   deliver it.

Engines are not held level with each other: one that ran to its next finish may be ahead
of the clock by the span between two of its finishes (a fraction of a second here), and a
request sent to it meanwhile joins at its next step boundary (``VirtualClient``). Holding
them level would cut every fast-forwarded decode run into single steps. Runs of
identical decode steps are applied in bulk by the simulator's fast-forward, so a virtual
hour costs seconds. Batch writes (``asyncio.to_thread``) run inline, so that no real thread
ever races the virtual clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from bench.virtual.engines import SimEngine
from inference.sim.request import Request
from workers.core.clock import ManualClock


class InlineExecutor(ThreadPoolExecutor):
    """Runs submitted work at once, in the caller's thread: virtual time has no threads."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as failed:
            future.set_exception(failed)
        return future


async def settle() -> None:
    """Yield until no task or callback is ready to run: the core has reacted in full.

    asyncio has no public "idle" test; its ready queue is the one place that knows.
    """
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0)
    while loop._ready:  # type: ignore[attr-defined]
        await asyncio.sleep(0)


class VirtualTime:
    """Drives the clock and the engines until a horizon; ``at`` queues timed callbacks."""

    def __init__(self, clock: ManualClock, engines: list[SimEngine]) -> None:
        self.clock = clock
        self.engines = engines
        self._finished: list[tuple[float, int, SimEngine, list[Request]]] = []
        self._timed: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.engine_runs = 0  # run_until calls: the driver's unit of work

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timed, (when, next(self._order), action))

    async def run(self, horizon: float) -> None:
        clock = self.clock
        while True:
            await settle()
            deadline = clock.next_deadline()
            finished_at = self._finished[0][0] if self._finished else math.inf
            timed_at = self._timed[0][0] if self._timed else math.inf
            upcoming = min(math.inf if deadline is None else deadline, finished_at, timed_at)
            next_at = min(upcoming, horizon)
            if self._step_engine(next_at):
                continue
            if next_at >= horizon and upcoming > horizon:
                clock.advance(max(0.0, horizon - clock.now()))
                await settle()
                return
            clock.advance(max(0.0, next_at - clock.now()))
            if finished_at <= next_at:
                _, _, engine, requests = heapq.heappop(self._finished)
                engine.deliver(requests)
            elif timed_at <= next_at:
                heapq.heappop(self._timed)[2]()

    async def wind_down(self, task: asyncio.Task[Any]) -> None:
        """Run the clock on until ``task`` ends: a run stopped at the horizon may be waiting
        on the clock (an engine's reload under way, which a stop lets finish, as a real
        relay never leaves an engine paused). Nothing is measured any more."""
        while True:
            await settle()
            if task.done():
                task.result()
                return
            deadline = self.clock.next_deadline()
            if deadline is None:
                raise RuntimeError("the run waits on something no virtual clock will bring")
            self.clock.advance(max(0.0, deadline - self.clock.now()))

    def _step_engine(self, next_at: float) -> bool:
        """Run the earliest busy engine up to its next finish; False when none may step."""
        busy = [engine for engine in self.engines if engine.busy]
        if not busy:
            return False
        first = min(busy, key=lambda engine: engine.virtual.now)
        if first.virtual.now >= next_at:
            return False
        incarnation = first.virtual
        finished = incarnation.run_until(next_at)
        self.engine_runs += 1
        if finished:
            heapq.heappush(self._finished, (incarnation.now, next(self._order), first, finished))
        return True
