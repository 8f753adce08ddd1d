"""Several runs on the same simulated engines, in one virtual time: each with its own
orchestrator, controller and policy, as each would be hosted by a worker, arbitrated at
every poll period by the runtime's own ``ShareTaker`` through an in-memory claims exchange
(the runtime's goes through the database; the rule and the claims are the same).

A run's claim leaves the exchange when the run ends, as a hosted run's does when its state
leaves the hosted ones; when its host dies (``host_dies``), the claim stays until it goes
stale (``CLAIM_TTL_S`` after its last renewal), as a dead host's row does in the database.
Each run's monitor scrapes the engines itself (``SimEngine.sample`` per reader) and its
requests carry its id, so what each run holds of the KV cache is read from the simulator's own
block tables.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass

from bench.virtual.driver import InlineExecutor, VirtualTime
from bench.virtual.engines import SimEngine
from bench.virtual.outcome import PoolDecision
from bench.virtual.pool_workload import PoolRun, PoolWorkload
from bench.virtual.run import HostedRun, concurrency_table, host_run
from workers.core.clock import ManualClock
from workers.core.pool_share import ShareTaker
from workers.core.samples import EngineRole
from workers.core.sharing import CLAIM_TTL_S, LOOK_MAX_S, Claim


@dataclass(frozen=True, slots=True)
class RunPoint:
    """One run at one look at the pool."""

    run_id: int
    inflight: int  # its episodes in flight
    kv_tokens: int  # KV tokens its requests hold (distinct blocks, every serving engine)
    cap: int
    ceiling: int | None
    completed_tokens: int  # cumulative
    turnover: float  # its controller's full replacements of its pool since its start


@dataclass(frozen=True, slots=True)
class PoolPoint:
    """The pool at one look (every poll period): the live runs, and the engines'
    preemptions so far."""

    at: float
    runs: tuple[RunPoint, ...]
    preemptions: int

    def of(self, run_id: int) -> RunPoint | None:
        return next((r for r in self.runs if r.run_id == run_id), None)


@dataclass(frozen=True, slots=True)
class PoolOutcome:
    workload: str
    policy: str
    seconds: float
    points: tuple[PoolPoint, ...]
    decisions: dict[int, tuple[PoolDecision, ...]]  # by run: its share decisions among them
    completed_tokens: dict[int, int]  # by run, at its end or the horizon
    kv_tokens: int  # the serving engines' KV cache, all of them
    wall_s: float = 0.0


def run_pool(pool: PoolWorkload, policy: str, seconds: float | None = None) -> PoolOutcome:
    """Every run of ``pool`` under ``policy`` for ``seconds`` of virtual time (the pool's own
    by default); deterministic for a pool and a policy."""
    horizon = pool.seconds if seconds is None else seconds
    started = time.perf_counter()
    outcome = asyncio.run(_pool(pool, policy, horizon))
    return dataclasses.replace(outcome, wall_s=time.perf_counter() - started)


@dataclass(slots=True)
class _Live:
    run: PoolRun
    hosted: HostedRun
    task: asyncio.Task[None]
    arbiter: asyncio.Task[None]
    completed_tokens: int | None = None  # taken when it ends; None while it runs


async def _pool(pool: PoolWorkload, policy: str, horizon: float) -> PoolOutcome:
    asyncio.get_running_loop().set_default_executor(InlineExecutor())
    clock = ManualClock()
    seed = pool.runs[0].workload.document.get("seed", 0)
    engines = [SimEngine(shape, seed=seed * 1000 + i) for i, shape in enumerate(pool.engines)]
    serving = [e for e in engines if e.shape.role is not EngineRole.PREFILL]
    driver = VirtualTime(clock, engines)
    claims: dict[int, Claim] = {}
    renewed: dict[int, float] = {}  # when each claim was last written
    live: dict[int, _Live] = {}
    points: list[PoolPoint] = []

    async def exchange(claim: Claim) -> list[Claim]:
        now = clock.now()
        since = claims[claim.run_id].since if claim.run_id in claims else now
        claims[claim.run_id] = dataclasses.replace(claim, since=since)
        renewed[claim.run_id] = now
        return [dataclasses.replace(c, age=now - renewed[c.run_id]) for c in claims.values()]

    def start(run: PoolRun) -> None:
        table = concurrency_table(policy, pool.poll_interval_s)
        config = run.workload.run_config({**table, "share": run.share, "priority": run.priority})
        hosted = host_run(config, engines, clock, None, reader=f"{run.run_id}:")
        orchestrator = hosted.orchestrator
        names = frozenset(e.name for e in hosted.members.polled())
        look_s = min(pool.poll_interval_s, LOOK_MAX_S)  # as the runtime's host looks
        taker = ShareTaker(
            run_id=run.run_id,
            weight=run.share,
            priority=run.priority,
            max_inflight=config.concurrency.controller.max_inflight,
            controller=orchestrator.loop.controller,
            orchestrator=orchestrator,
            engine_urls=lambda: names,
            exchange=exchange,
            clock=clock,
            renew_s=look_s,
        )
        loop = asyncio.get_running_loop()
        task = loop.create_task(orchestrator.run())
        arbiter = loop.create_task(_every(taker, clock, look_s))
        live[run.run_id] = _Live(run, hosted, task, arbiter)

    def end(run: PoolRun) -> None:
        ended = live[run.run_id]
        ended.completed_tokens = ended.hosted.recorder.completed_tokens
        _stop(ended.arbiter)
        ended.hosted.orchestrator.stop("the run's end_s")  # its episodes' requests aborted
        if run.host_dies and run.run_id in renewed:
            driver.at(renewed[run.run_id] + CLAIM_TTL_S, lambda: claims.pop(run.run_id, None))
        else:
            claims.pop(run.run_id, None)

    def look() -> None:
        now = clock.now()
        running = [one for one in live.values() if one.completed_tokens is None]
        points.append(
            PoolPoint(
                now,
                tuple(_point(one, serving, now) for one in running),
                sum(e.preemptions_so_far() for e in engines),
            )
        )

    # Every look is queued first, so that a look at the instant a run starts or ends sees
    # the pool as it was just before.
    for k in range(int(horizon // pool.poll_interval_s) + 1):
        driver.at(k * pool.poll_interval_s, look)
    for run in pool.runs:
        driver.at(run.start_s, lambda run=run: start(run))
        if run.end_s < horizon:
            driver.at(run.end_s, lambda run=run: end(run))
    await driver.run(horizon)
    for one in live.values():
        if one.completed_tokens is None:
            one.completed_tokens = one.hosted.recorder.completed_tokens
            _stop(one.arbiter)
            one.hosted.orchestrator.stop("benchmark horizon")
    for one in live.values():
        await driver.wind_down(one.task)
    return PoolOutcome(
        workload=pool.name,
        policy=policy,
        seconds=horizon,
        points=tuple(points),
        decisions={
            run_id: tuple(one.hosted.recorder.pool_decisions) for run_id, one in live.items()
        },
        completed_tokens={run_id: one.completed_tokens or 0 for run_id, one in live.items()},
        kv_tokens=sum(e.virtual.engine.config.kv_capacity_tokens for e in serving),
    )


def _stop(arbiter: asyncio.Task[None]) -> None:
    """End a run's sharing loop; one that died of an error fails the benchmark with it."""
    if arbiter.done() and not arbiter.cancelled() and arbiter.exception() is not None:
        raise RuntimeError("a run's sharing loop failed") from arbiter.exception()
    arbiter.cancel()


async def _every(taker: ShareTaker, clock: ManualClock, period_s: float) -> None:
    """The host's sharing loop, on the virtual clock."""
    while True:
        await taker.arbitrate()
        await clock.sleep(period_s)


def _point(one: _Live, serving: list[SimEngine], now: float) -> RunPoint:
    loop = one.hosted.orchestrator.loop
    prefix = f"{one.run.run_id}:"
    kv = 0
    for engine in serving:
        tables = engine.virtual.engine.kv
        blocks = {
            b for req, held in tables.req_to_blocks.items() if req.startswith(prefix) for b in held
        }
        kv += len(blocks) * tables.block_size
    controller = loop.controller
    return RunPoint(
        run_id=one.run.run_id,
        inflight=loop.dispatcher.inflight,
        kv_tokens=kv,
        cap=loop.dispatcher.cap,
        ceiling=controller.ceiling,
        completed_tokens=one.hosted.recorder.completed_tokens,
        turnover=controller.make_stats(now).turnover,
    )
