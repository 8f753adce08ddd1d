"""Timed events of a workload, applied to a running benchmark.

- ``lengths``: every train environment's answers grow by ``factor`` (the policy drifts to
  longer reasoning); environments whose lengths the model decides get it on the engines'
  own end-of-sequence lengths. Answers queued on an engine and not yet started grow too,
  whichever environment asked, as the drifted weights write them
  (``SimEngine.lengthen_unstarted``).
- ``engine_down`` / ``engine_up``: engine k dies (its requests fail) or joins (fresh).
- ``kv``: the engines restart with ``factor`` times their KV cache.
- ``eval_wave``: an evaluation wave starts now.
- ``engine_join`` / ``engine_leave``: an operator adds engine k to the running run (it was
  not in it: not polled, no client) or takes it out, draining for ``drain_s``, through the
  orchestrator's own ``add_engine`` and ``remove_engine``.

Events other than ``lengths`` touch only the engines in the run at the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench.virtual.engines import SimEngine
from bench.virtual.workload import Event
from inference.sim.sampling import LengthDistribution
from workers.core.clock import Clock
from workers.core.config.run import RunConfig
from workers.core.environments.base import EngineClient
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.orchestrator.relay import EngineWeights


@dataclass(slots=True)
class Members:
    """Which simulated engines are in the run. The recorder polls these, a leaving engine
    until it has left (``left``, the orchestrator's hook), as the real monitor polls every
    engine of the run; an engine that joins is reached through ``connect``: its client, and
    its weight routes when the run relays weights."""

    engines: list[SimEngine]
    connect: Callable[[SimEngine], tuple[EngineClient, EngineWeights | None]]
    absent: set[str] = field(default_factory=set)

    def polled(self) -> list[SimEngine]:
        return [engine for engine in self.engines if engine.name not in self.absent]

    def left(self, name: str) -> None:
        self.absent.add(name)


def apply_event(
    event: Event,
    orchestrator: Orchestrator,
    members: Members,
    config: RunConfig,
    clock: Clock,
) -> None:
    engines = members.engines
    chosen = [engines[i] for i in event.engines if engines[i].name not in members.absent]
    if event.kind == "engine_join":
        for engine in [engines[i] for i in event.engines]:
            client, weights = members.connect(engine)
            orchestrator.loop.command(orchestrator.add_engine(engine.name, client, weights))
            members.absent.discard(engine.name)
    elif event.kind == "engine_leave":
        for engine in chosen:
            orchestrator.loop.command(orchestrator.remove_engine(engine.name, event.drain_s))
    elif event.kind == "lengths":
        scale_lengths(config, engines, event.factor)
    elif event.kind == "engine_down":
        for engine in chosen:
            engine.die()
    elif event.kind == "engine_up":
        for engine in chosen:
            engine.join(clock.now())
    elif event.kind == "kv":
        for engine in chosen:
            engine.join(
                clock.now(), max(engine.shape.block_size, int(engine.kv_tokens * event.factor))
            )
    else:
        orchestrator.start_eval_wave()


def scale_lengths(config: RunConfig, engines: list[SimEngine], factor: float) -> None:
    """Answers ``factor`` times longer, on the environments' own length shapes."""
    for env in config.train_envs:
        inner = getattr(env.environment, "inner", env.environment)
        shape = getattr(inner, "completion_tokens", None)
        if shape is not None:
            inner.completion_tokens = shape.scaled(factor)
    for engine in engines:
        model = engine.virtual.engine
        length = model.default_length
        if length is not None:
            model.default_length = LengthDistribution(
                length.kind, length.mean * factor, length.spread
            )
        engine.lengthen_unstarted(factor)
