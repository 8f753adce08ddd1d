"""One benchmark run: a workload under one policy, in virtual time, with the runtime's own
orchestrator, control loop, dispatcher and controller.

The policy is the only thing that changes between runs of a workload: ``reference``,
``pacer``, ``gradient2`` or ``fixed:N`` (the cap pinned at N by the controller's bounds).
Everything the run measures is taken at the horizon, before the orchestrator is stopped,
so that the cancellations of the shutdown never count as waste.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from bench.virtual.driver import InlineExecutor, VirtualTime
from bench.virtual.engines import InFlight, PrefillPool, SimEngine, VirtualClient, Waste
from bench.virtual.events import Members, apply_event
from bench.virtual.outcome import EngineEpisodes, PoolDecision, RunOutcome, Sample
from bench.virtual.tally import Tallied
from bench.virtual.weights import VirtualTrainer, VirtualWeights
from bench.virtual.workload import Training, Workload
from workers.core.clock import ManualClock
from workers.core.config.run import RunConfig
from workers.core.decisions import Decision, DecisionKind
from workers.core.dispatch.episodes import FinishedEpisode
from workers.core.dispatch.permits import PermitOutcome
from workers.core.environments.base import EngineClient
from workers.core.orchestrator.batches import Batch, StepReport
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.orchestrator.ports import QuietReporter
from workers.core.orchestrator.relay import EngineWeights
from workers.core.samples import EngineRole, LoadSample

ADAPTIVE = ("reference", "pacer", "gradient2")
POOL_KINDS = frozenset(  # decisions about the run's engines and the pool it shares, kept
    {
        DecisionKind.BOOTSTRAP,  # in a pool: its start at its part of the pool
        DecisionKind.RESCALE,
        DecisionKind.ENGINE_JOIN,
        DecisionKind.ENGINE_DRAIN,
        DecisionKind.ENGINE_LEAVE,
        DecisionKind.SHARE,
    }
)


def concurrency_table(
    policy: str,
    poll_interval_s: float,
    start: int | None = None,
    pacer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run config's ``[concurrency]`` for a policy name as the CLI takes it."""
    table: dict[str, Any] = {"poll_interval_s": poll_interval_s}
    if policy.startswith("fixed:"):
        cap = int(policy.removeprefix("fixed:"))
        return {**table, "policy": "fixed", "min_inflight": cap, "max_inflight": cap}
    if policy not in ADAPTIVE:
        raise ValueError(f"policy must be one of {', '.join(ADAPTIVE)} or fixed:N, got {policy!r}")
    table["policy"] = policy
    if start is not None:
        table["initial_inflight"] = start
    if pacer:
        table["pacer"] = pacer
    return table


class NoWriter:
    """Batches go nowhere: a benchmark measures generation, not storage."""

    def written_steps(self) -> set[int]:
        return set()

    def path_of(self, step: int) -> str:
        return ""

    def write(self, batch: Batch, report: StepReport) -> None:
        return None


class Recorder(QuietReporter):
    """What the run measures: completed tokens as episodes end, and on which engine; at
    every poll of the engines in the run, the load and the controller's count of
    turnovers, which the ramp is read in; the decisions about the pool (its engines, and
    the run's share of engines other runs use), as the reporter of a hosted run hears them."""

    def __init__(self, members: Members, in_flight: InFlight, reader: str = "") -> None:
        self.members = members
        self.in_flight = in_flight
        self.reader = reader  # whose monitor scrapes: runs sharing engines each have one
        self.completed_tokens = 0
        self.completed_episodes = 0
        self.failed_episodes = 0
        self.samples: list[Sample] = []
        self.pool_decisions: list[PoolDecision] = []
        self.by_engine: dict[str, EngineEpisodes] = {}
        self.orchestrator: Orchestrator | None = None

    def episode(self, finished: FinishedEpisode[Any, Any]) -> None:
        if finished.outcome is PermitOutcome.COMPLETED and finished.result is not None:
            self.completed_tokens += finished.result.tokens
            self.completed_episodes += 1
        elif finished.outcome is PermitOutcome.FAILED:
            self.failed_episodes += 1
        name, started = finished.engine_id, finished.started_at
        seen = self.by_engine.get(name, EngineEpisodes(name, 0, started, started))
        self.by_engine[name] = EngineEpisodes(
            name, seen.episodes + 1, min(seen.first_start, started), max(seen.last_start, started)
        )

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        self.pool_decisions += [
            PoolDecision(d.at, d.kind.value, d.cause.value, d.reason)
            for d in decisions
            if d.kind in POOL_KINDS
        ]

    def poll(self, now: float) -> list[LoadSample]:
        samples = [engine.sample(now, self.reader) for engine in self.members.polled()]
        assert self.orchestrator is not None
        loop = self.orchestrator.loop
        dispatcher = loop.dispatcher
        decode = [s for s in samples if s.role is not EngineRole.PREFILL and s.is_fresh]
        self.samples.append(
            Sample(
                at=now,
                cap=dispatcher.cap,
                inflight=dispatcher.inflight,
                completed_tokens=self.completed_tokens,
                progress=self.progress(),
                kv=max((s.kv_usage for s in decode), default=0.0),
                running=sum(s.num_running for s in decode),
                waiting=sum(s.capacity_waiters for s in decode),
                turnover=loop.controller.make_stats(now).turnover,
            )
        )
        return samples

    def progress(self) -> int:
        """The run's work so far: completed tokens, and those of the episodes in flight."""
        return self.completed_tokens + self.in_flight.tokens()


def run_workload(
    workload: Workload,
    policy: str,
    *,
    seconds: float | None = None,
    start: int | None = None,
    pacer: dict[str, Any] | None = None,
) -> RunOutcome:
    """Run one policy on a workload for ``seconds`` of virtual time (the workload's own by
    default); deterministic for a workload, a policy and its settings."""
    table = concurrency_table(policy, workload.poll_interval_s, start, pacer)
    config = workload.run_config(table)
    horizon = workload.seconds if seconds is None else seconds
    started = time.perf_counter()
    outcome = asyncio.run(_run(workload, config, policy, horizon))
    return dataclasses.replace(outcome, wall_s=time.perf_counter() - started, start=start)


@dataclass(slots=True)
class HostedRun:
    """One run on simulated engines, built as a worker builds it: its orchestrator (with its
    own controller), what it records, which engines it is in, the tokens it wasted."""

    orchestrator: Orchestrator
    recorder: Recorder
    members: Members
    waste: Waste
    config: RunConfig  # its environments tallied for waste


def host_run(
    config: RunConfig,
    engines: list[SimEngine],
    clock: ManualClock,
    training: Training | None,
    joining: frozenset[str] = frozenset(),
    reader: str = "",
) -> HostedRun:
    """A run's orchestrator on ``engines``; ``reader`` names its monitor and its requests,
    so that runs sharing the engines each scrape them and each find their own requests."""
    waste = Waste()
    in_flight = InFlight()
    prefill = PrefillPool([e for e in engines if e.shape.role is EngineRole.PREFILL])

    def connect(engine: SimEngine) -> tuple[EngineClient, EngineWeights | None]:
        """A serving engine's client, and its weight routes when a trainer is in the loop."""
        pick = prefill.pick if prefill.engines else None
        client = VirtualClient(engine, clock.now, waste, pick, owner=reader)
        return client, None if training is None else VirtualWeights(engine, clock)

    members = Members(engines, connect, set(joining))
    routes = {
        e.name: connect(e) for e in members.polled() if e.shape.role is not EngineRole.PREFILL
    }
    by_name = {e.name: e for e in engines}
    tallied = tuple(
        dataclasses.replace(env, environment=Tallied(env.environment, waste, in_flight))
        for env in config.envs
    )
    config = dataclasses.replace(config, envs=tallied)
    recorder = Recorder(members, in_flight, reader)

    async def poll() -> list[LoadSample]:
        return recorder.poll(clock.now())

    weights = {n: w for n, (_, w) in routes.items() if w is not None}
    orchestrator = Orchestrator(
        config,
        controller=config.concurrency.make_controller(),
        poll=poll,
        engines={n: client for n, (client, _) in routes.items()},
        clock=clock,
        writer=NoWriter(),
        reporter=recorder,
        max_model_len=lambda name: by_name[name].virtual.engine.config.max_model_len,
        on_episode=recorder.episode,
        acks=None if training is None else VirtualTrainer(clock, training.train_s),
        weights=None if training is None else weights,
        on_engine_left=members.left,
    )
    recorder.orchestrator = orchestrator
    return HostedRun(orchestrator, recorder, members, waste, config)


async def _run(workload: Workload, config: RunConfig, policy: str, horizon: float) -> RunOutcome:
    asyncio.get_running_loop().set_default_executor(InlineExecutor())
    clock = ManualClock()
    engines = [
        SimEngine(shape, seed=config.seed * 1000 + i) for i, shape in enumerate(workload.engines)
    ]
    hosted = host_run(config, engines, clock, workload.training, workload.joining)
    orchestrator, recorder = hosted.orchestrator, hosted.recorder
    driver = VirtualTime(clock, engines)
    for event in workload.events:
        driver.at(
            event.at,
            lambda event=event: apply_event(
                event, orchestrator, hosted.members, hosted.config, clock
            ),
        )
    task = asyncio.get_running_loop().create_task(orchestrator.run())
    await driver.run(horizon)
    outcome = RunOutcome(
        workload=workload.name,
        policy=policy,
        seconds=horizon,
        completed_tokens=recorder.completed_tokens,
        progress_tokens=recorder.progress(),
        completed_episodes=recorder.completed_episodes,
        failed_episodes=recorder.failed_episodes,
        wasted_tokens=hosted.waste.tokens,
        preemptions=sum(e.preemptions_so_far() for e in engines),
        max_kv=max((s.kv for s in recorder.samples), default=0.0),
        samples=tuple(recorder.samples),
        engine_runs=driver.engine_runs,
        pool_decisions=tuple(recorder.pool_decisions),
        by_engine=tuple(recorder.by_engine.values()),
    )
    orchestrator.stop("benchmark horizon")
    await driver.wind_down(task)
    return outcome
