"""How long the dispatcher takes to refill 128 admissions with 2,048 episodes in flight.

    python -m bench.dispatcher_refill [--repeats N]

The reference implementation needed 5.4 ms for this refill. The pool is filled to 2,048
episodes (groups of 8 over 8 engines, each episode parked on a future that never resolves),
16 more groups wait, and the cap is raised by 128: the timed call admits them all, which means
choosing engines, issuing permits, creating the 128 asyncio tasks and charging the pacing
window. Separately, the time until those 128 tasks have run to their first await is shown,
since that is when their requests would leave for the engines. Between repetitions the
admitted groups are shed (they are the youngest) and the pacing window is let slide.

Wall time is what a run sees; the thread's CPU time is shown too, because on a shared machine
the wall-time tail measures the other processes that took the core, not the dispatcher.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from workers.core.clock import ManualClock
from workers.core.dispatch.dispatcher import Dispatcher
from workers.core.dispatch.episodes import EpisodeTicket, FinishedEpisode, GroupSpec
from workers.core.dispatch.permits import EpisodeKind

INFLIGHT = 2048  # the pool the reference was measured at
REFILL = 128  # admissions per refill
GROUP = 8  # episodes per group
ENGINES = tuple(f"engine-{i}" for i in range(8))
REFERENCE_MS = 5.4  # the reference implementation's cost for the same refill


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure(repeats: int) -> tuple[list[float], list[float], list[float]]:
    clock = ManualClock()
    never = asyncio.get_running_loop().create_future()
    started = 0

    async def run_episode(ticket: EpisodeTicket[int], engine: str) -> int:
        nonlocal started
        started += 1
        return await asyncio.shield(never)

    def on_finished(_: FinishedEpisode[int, int]) -> None:
        return None

    dispatcher: Dispatcher[int, int] = Dispatcher(
        run_episode=run_episode,
        on_finished=on_finished,
        clock=clock,
        cap=INFLIGHT,
        engines=ENGINES,
    )
    serial = 0

    def submit(groups: int) -> None:
        nonlocal serial
        for _ in range(groups):
            serial += 1
            payloads = tuple(range(GROUP))
            dispatcher.submit(GroupSpec(f"g{serial}", EpisodeKind.TRAIN, "bench", 0, payloads))

    submit(INFLIGHT // GROUP)
    while dispatcher.inflight < INFLIGHT:
        clock.advance(5.0)
        await asyncio.sleep(0)
    refill_ms, refill_cpu_ms, first_await_ms = [], [], []
    for _ in range(repeats):
        submit(REFILL // GROUP)
        clock.advance(5.0)  # a fresh pacing window, as after a poll period
        await asyncio.sleep(0)
        gc.collect()
        before = started
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        dispatcher.set_cap(INFLIGHT + REFILL)
        admitted, admitted_cpu = time.perf_counter_ns(), time.thread_time_ns()
        while started - before < REFILL:
            await asyncio.sleep(0)
        running = time.perf_counter_ns()
        assert dispatcher.inflight == INFLIGHT + REFILL
        refill_ms.append((admitted - start) / 1e6)
        refill_cpu_ms.append((admitted_cpu - start_cpu) / 1e6)
        first_await_ms.append((running - start) / 1e6)
        dispatcher.set_cap(INFLIGHT)
        dispatcher.shed(REFILL)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert dispatcher.inflight == INFLIGHT
    await dispatcher.aclose()
    return refill_ms, refill_cpu_ms, first_await_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    refill, refill_cpu, first_await = asyncio.run(measure(args.repeats))
    print(
        f"refill of {REFILL} admissions at {INFLIGHT} in flight, "
        f"{len(ENGINES)} engines, groups of {GROUP}, {args.repeats} repetitions"
    )
    for label, values in (
        ("admit, wall", refill),
        ("admit, thread CPU", refill_cpu),
        ("until all at first await", first_await),
    ):
        print(
            f"  {label:25s} median {statistics.median(values):.3f} ms, "
            f"p90 {percentile(values, 0.9):.3f} ms, min {min(values):.3f} ms"
        )
    per_admission_us = statistics.median(refill) * 1000 / REFILL
    print(f"  per admission: {per_admission_us:.1f} us; reference needed {REFERENCE_MS} ms")


if __name__ == "__main__":
    main()
