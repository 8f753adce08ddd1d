"""Timed events of a workload, applied to a running benchmark.

- ``lengths``: every train environment's answers grow by ``factor`` (the policy drifts to
  longer reasoning); environments whose lengths the model decides get it on the engines'
  own end-of-sequence lengths.
- ``engine_down`` / ``engine_up``: engine k dies (its requests fail) or joins (fresh).
- ``kv``: the engines restart with ``factor`` times their KV cache.
- ``eval_wave``: an evaluation wave starts now.
"""

from __future__ import annotations

from bench.virtual.engines import SimEngine
from bench.virtual.workload import Event
from inference.sim.sampling import LengthDistribution
from workers.core.clock import Clock
from workers.core.config.run import RunConfig
from workers.core.orchestrator.orchestrator import Orchestrator


def apply_event(
    event: Event,
    orchestrator: Orchestrator,
    engines: list[SimEngine],
    config: RunConfig,
    clock: Clock,
) -> None:
    chosen = [engines[i] for i in event.engines]
    if event.kind == "lengths":
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
