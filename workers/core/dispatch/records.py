"""The dispatcher's configuration, its gauges, and what a shed did."""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.core.dispatch.breaker import BreakerConfig
from workers.core.dispatch.pacing import PacingConfig
from workers.core.dispatch.tallies import Tally, TallyKey
from workers.core.validation import check_range


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    max_off_policy_steps: int = 8  # prime-rl's orchestrator default
    pacing: PacingConfig = field(default_factory=PacingConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)

    def __post_init__(self) -> None:
        check_range("max_off_policy_steps", self.max_off_policy_steps, 0, 1_000_000)


@dataclass(frozen=True, slots=True)
class ShedReport:
    """What one shed did."""

    group_ids: tuple[str, ...]  # groups closed, youngest first
    cancelled: int  # live episodes whose tasks were cancelled


@dataclass(frozen=True, slots=True)
class DispatcherStats:
    """Gauges of the dispatcher at one moment."""

    at: float
    cap: int
    inflight: int
    inflight_train: int
    inflight_eval: int
    pending_episodes: int  # queued, not yet admitted
    open_groups: int  # groups with pending or live episodes
    pacing_paid: int  # paid admissions in the current pacing window
    pacing_credits: int  # free replacements banked by completions, not yet spent
    pacing_budget: int  # paid admissions allowed per window at this cap
    healthy_engines: int
    inflight_by_engine: dict[str, int]
    train_by_engine: dict[str, int]  # the train part of inflight_by_engine
    policy_version: int
    tallies: dict[TallyKey, Tally]
