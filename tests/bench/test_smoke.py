"""The benchmark's smoke subset: on a small workload, pacer must not fall below the reference.

One engine, single-turn answers of ~400 tokens, five virtual minutes: both policies start
from the KV-derived cap and must ramp; the reference holds at its 0.6 KV soft line, pacer
runs the cache fuller. Each run costs a few wall seconds.
"""

from __future__ import annotations

import asyncio

from bench.virtual.driver import InlineExecutor, VirtualTime
from bench.virtual.engines import SimEngine
from bench.virtual.run import concurrency_table, host_run, run_workload
from bench.virtual.workload import parse_workload
from workers.core.clock import ManualClock

SMALL = {
    "workload": {"name": "smoke"},
    "run": {"seconds": 300, "batch_size": 32, "group_size": 4, "max_off_policy_steps": 16},
    "engine": [
        {
            "kv_tokens": 16384,
            "max_model_len": 2048,
            "step_overhead_s": 0.04,
            "per_seq_s": 0.0005,
        }
    ],
    "env": [
        {
            "name": "longtail",
            "args": {
                "prompt_tokens": 64,
                "completion_tokens": {"kind": "lognormal", "mean": 400, "sigma": 0.5},
            },
        }
    ],
}


def test_pacer_is_at_least_the_reference_on_a_small_workload() -> None:
    workload = parse_workload(SMALL)
    pacer = run_workload(workload, "pacer")
    reference = run_workload(workload, "reference")
    assert pacer.completed_episodes > 0 and reference.completed_episodes > 0
    assert pacer.throughput >= reference.throughput, (pacer.figures(), reference.figures())


def test_a_run_is_deterministic() -> None:
    workload = parse_workload({**SMALL, "run": {**SMALL["run"], "seconds": 60}})
    first, again = run_workload(workload, "fixed:16"), run_workload(workload, "fixed:16")
    assert (first.completed_tokens, first.preemptions) == (
        again.completed_tokens,
        again.preemptions,
    )
    assert [s.cap for s in first.samples] == [16] * len(first.samples)


def test_updates_in_the_loop_pause_the_engines_for_their_reload() -> None:
    """A trainer in the loop: with a reload far longer than the run, sync updates stop every
    engine after the first step, rolling ones only the engine reloading; without one (no
    ``[trainer]``) the pool never stops."""
    engine = {**SMALL["engine"][0], "count": 2, "reload_s": 1000.0}  # type: ignore[index]
    updated = {**SMALL, "engine": [engine], "trainer": {"updates": "sync", "train_s": 1.0}}
    free = run_workload(parse_workload({**SMALL, "engine": [engine]}), "pacer")
    sync = run_workload(parse_workload(updated), "pacer")
    rolling_document = {**updated, "trainer": {"updates": "rolling", "train_s": 1.0}}
    rolling = run_workload(parse_workload(rolling_document), "pacer")
    assert free.completed_tokens > rolling.completed_tokens > sync.completed_tokens > 0


def test_every_generated_token_is_completed_in_flight_or_wasted() -> None:
    """The steady rate reads a run's work as its completed tokens plus those generated so far
    for its episodes in flight; that is the work the engines did, less the waste, only if
    every generated token is in exactly one of the three. A pool of 200 on one engine
    preempts, and groups more than one step stale are shed, so none of the three is empty
    at the horizon."""
    run = {**SMALL["run"], "seconds": 90, "max_off_policy_steps": 1}
    workload = parse_workload({**SMALL, "run": run})
    config = workload.run_config(concurrency_table("fixed:200", workload.poll_interval_s))

    async def simulate() -> tuple[int, int, int, int]:
        asyncio.get_running_loop().set_default_executor(InlineExecutor())
        clock = ManualClock()
        engines = [SimEngine(shape, seed=n) for n, shape in enumerate(workload.engines)]
        hosted = host_run(config, engines, clock, None)
        driver = VirtualTime(clock, engines)
        task = asyncio.get_running_loop().create_task(hosted.orchestrator.run())
        await driver.run(workload.seconds)
        recorder = hosted.recorder
        generated = sum(e.virtual.engine.counters.generation_tokens for e in engines)
        seen = (generated, recorder.completed_tokens, recorder.progress(), hosted.waste.tokens)
        hosted.orchestrator.stop("test horizon")
        await driver.wind_down(task)
        return seen

    generated, completed, progress, wasted = asyncio.run(simulate())
    assert completed > 0 and progress > completed and wasted > 0
    assert generated == progress + wasted
