"""The runtime holding 10,000 episodes in flight: what admission and a poll cost at that size.

    python -m bench.inflight_load [--inflight 10000] [--seconds 180] [--engines 8]

The real orchestrator, control loop, dispatcher and controller (policy ``pacer``) run a
single-turn workload against in-process engines whose turns take 40-80 s, so the pool fills
to the cap and stays there while few episodes complete per second (the process keeps up in
real time; nothing is virtual but the engines). Every poll reports the engines clear, so the
cap holds at ``--inflight``. Printed: the time to fill the pool, CPU per admitted episode in
the dispatcher's refill, CPU per ``on_poll`` and per ``on_completion`` of the controller at
full size, the event loop's lag (how late a 100 ms timer fires) and the peak memory.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.dispatcher_refill import percentile
from bench.orchestrator_overhead import NoFiles, clear_sample
from workers.core.clock import MonotonicClock
from workers.core.config.run import RunConfig, parse_run_config
from workers.core.controller.concurrency import Controller
from workers.core.dispatch.dispatcher import Dispatcher
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.samples import LoadSample
from workers.core.turns import Turn, TurnResult

TURN_S = (40.0, 80.0)  # long turns: the pool stays full while completions stay few
LAG_TICK_S = 0.1
PROGRESS_EVERY_S = 10


class SlowEngine:
    """Answers each turn after 40-80 s with ``max_tokens`` made-up tokens."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    async def tokenize(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        return tuple(range(2, 2 + len(text.split())))

    async def complete(self, turn: Turn) -> TurnResult:
        await asyncio.sleep(self._rng.uniform(*TURN_S))
        n = turn.max_tokens
        return TurnResult(n, " 7" * n, "stop", tuple(-0.5 for _ in range(n)), tuple(range(n)))


class Timings:
    """CPU seconds spent in each timed call, by name."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {}

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        spent = self.calls.setdefault(name, [])

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent.append(time.thread_time() - started)

        return timed


class TimedController:
    """The real controller, with its two hot entry points timed."""

    def __init__(self, inner: Controller, timings: Timings) -> None:
        self._inner = inner
        self.on_poll = timings.wrap("on_poll", inner.on_poll)
        self.on_completion = timings.wrap("on_completion", inner.on_completion)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def config(inflight: int, engines: int) -> RunConfig:
    return parse_run_config(
        {
            "name": "inflight-load",
            "batch_size": 1024,
            "group_size": 8,
            "max_steps": 1_000,
            "max_off_policy_steps": 1_000,
            "concurrency": {
                "policy": "pacer",
                "initial_inflight": inflight,
                "max_inflight": inflight,
                "poll_interval_s": 1.0,
            },
            "env": [{"name": "arithmetic", "sampling": {"max_tokens": 8}}],
            "engine": [{"url": f"http://engine-{index}:8000"} for index in range(engines)],
        }
    )


def clear_poll(names: list[str], inflight: Callable[[], int]) -> Callable[[], Any]:
    async def poll() -> list[LoadSample]:
        running = inflight() // len(names)
        return [
            clear_sample(name, running=running, kv_usage=0.3, kv_capacity_tokens=10_000_000)
            for name in names
        ]

    return poll


async def event_loop_lag(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        due = time.monotonic() + LAG_TICK_S
        await asyncio.sleep(LAG_TICK_S)
        lags.append(time.monotonic() - due)


async def hold(inflight: int, seconds: float, engines: int) -> None:
    cfg = config(inflight, engines)
    names = [f"engine-{index}" for index in range(engines)]
    timings = Timings()
    refill, start = Dispatcher._refill, Dispatcher._start
    admitted = [0]

    def counted_start(self: Dispatcher[Any, Any], group: Any, count: int, now: float) -> None:
        admitted[0] += count
        start(self, group, count, now)

    Dispatcher._refill = timings.wrap("refill", refill)  # type: ignore[method-assign]
    Dispatcher._start = counted_start  # type: ignore[method-assign]
    controller = TimedController(cfg.concurrency.make_controller(), timings)
    rng = random.Random(7)
    orchestrator = Orchestrator(
        cfg,
        controller=controller,  # type: ignore[arg-type]
        poll=clear_poll(names, lambda: admitted[0] - completed()),
        engines={name: SlowEngine(rng) for name in names},
        clock=MonotonicClock(),
        writer=NoFiles(),
    )

    def completed() -> int:
        return len(timings.calls.get("on_completion", []))

    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(event_loop_lag(lags, stop))
    run = asyncio.create_task(orchestrator.run())
    began = time.monotonic()
    filled_at: float | None = None
    full_polls = 0
    while time.monotonic() - began < seconds:
        await asyncio.sleep(1.0)
        now_inflight = admitted[0] - completed()
        if filled_at is None and now_inflight >= 0.99 * inflight:
            filled_at = time.monotonic() - began
            full_polls = len(timings.calls.get("on_poll", []))
        elapsed = time.monotonic() - began
        if round(elapsed) % PROGRESS_EVERY_S == 0:
            print(f"  {elapsed:4.0f} s: {now_inflight:6d} in flight", flush=True)
    stop.set()
    await ticker  # the lag while holding the pool, not while tearing it down
    orchestrator.stop()
    await asyncio.wait_for(run, timeout=120)
    Dispatcher._refill, Dispatcher._start = refill, start  # type: ignore[method-assign]
    report(inflight, filled_at, full_polls, admitted[0], timings, lags)


def report(
    inflight: int,
    filled_at: float | None,
    full_polls: int,
    admitted: int,
    timings: Timings,
    lags: list[float],
) -> None:
    def per_call(name: str, skip: int = 0) -> str:
        spent = timings.calls.get(name, [])[skip:]
        if not spent:
            return "none"
        micro = sorted(s * 1e6 for s in spent)
        p99 = percentile(micro, 0.99)
        return f"median {statistics.median(micro):.0f} us, p99 {p99:.0f} us over {len(micro)}"

    refill_cpu = sum(timings.calls.get("refill", []))
    fill = f"{filled_at:.0f} s" if filled_at is not None else "never"
    print(f"pool of {inflight} filled in {fill} (admission pacing: a tenth of the cap per 5 s)")
    print(f"  admitted {admitted} episodes: refill CPU {refill_cpu / admitted * 1e6:.1f} us each")
    print(f"  controller on_poll at full size: {per_call('on_poll', skip=full_polls)}")
    print(f"  controller on_completion: {per_call('on_completion')}")
    lag_ms = sorted(lag * 1e3 for lag in lags)
    print(
        f"  event loop lag (100 ms timer): median {statistics.median(lag_ms):.1f} ms, "
        f"p99 {percentile(lag_ms, 0.99):.1f} ms, max {lag_ms[-1]:.1f} ms, "
        f"{sum(lag > 100 for lag in lag_ms)} of {len(lag_ms)} over 100 ms"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak memory of the process: {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inflight", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--engines", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(hold(args.inflight, args.seconds, args.engines))


if __name__ == "__main__":
    main()
