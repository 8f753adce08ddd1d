"""Small constructors shared by the core's tests."""

from __future__ import annotations

from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.base import Policy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig, EpisodeCompletion
from workers.core.decisions import Decision
from workers.core.samples import EngineHealth, EngineRole, LoadSample


def sample(
    engine_id: str = "e0",
    *,
    role: EngineRole = EngineRole.UNIFIED,
    health: EngineHealth = EngineHealth.UP,
    kv: float = 0.1,
    running: int = 10,
    waiting: int = 0,
    waiting_capacity: int | None = 0,
    preemptions: int = 0,
    hits: int = 0,
    queries: int = 0,
    tokens: int = 100,
    capacity: int | None = 100_000,
    max_model_len: int | None = 1_000,
    restarted: bool = False,
    updating: bool = False,
) -> LoadSample:
    return LoadSample(
        engine_id=engine_id,
        role=role,
        scraped_at=0.0,
        health=health,
        kv_capacity_tokens=capacity,
        max_model_len=max_model_len,
        kv_usage=kv,
        num_running=running,
        num_waiting=waiting,
        num_waiting_capacity=waiting_capacity,
        num_preemptions=preemptions,
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        generation_tokens=tokens,
        restarted=restarted,
        updating=updating,
    )


def controller(policy: Policy | None = None, *, start: int = 100, **config: object) -> Controller:
    """A controller already bootstrapped at ``start`` by one clear poll at time 0."""
    made = Controller(
        ControllerConfig(initial_inflight=start, **config),  # type: ignore[arg-type]
        policy or ReferencePolicy(),
    )
    made.on_poll([sample()], inflight=start, now=0.0)
    return made


def complete(
    ctl: Controller,
    count: int,
    *,
    now: float,
    pool: int | None = None,
    tokens: int = 50,
    ok: bool = True,
    demand: int = 0,
) -> list[Decision]:
    """Finish ``count`` episodes, each with the pool at ``pool`` (default: the current cap)
    and the dispatcher's ``demand``."""
    decisions: list[Decision] = []
    for _ in range(count):
        size = ctl.cap if pool is None else pool
        done = EpisodeCompletion(tokens=tokens, ok=ok, pool=size, demand=demand)
        decisions.extend(ctl.on_completion(done, now=now))
    return decisions


def turnover(ctl: Controller, *, now: float) -> list[Decision]:
    """Complete one full pool's worth of episodes with the pool filling the cap."""
    return complete(ctl, ctl.cap, now=now)
