"""The reference policy: prime-rl's measured AIMD, kept faithful as the benchmark baseline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from workers.core.controller.policies.base import PoolView, Proposal, Reading
from workers.core.controller.policies.reductions import TrimRest, cut_proposal
from workers.core.controller.policies.signals import (
    Overload,
    OverloadTracker,
    classify,
    overload_figures,
)
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal
from workers.core.validation import check_range, stored_optional_count


@dataclass(frozen=True, slots=True)
class ReferenceConfig:
    """Thresholds of measured AIMD; every default is prime-rl's."""

    growth: float = 1.25  # prime-rl: one full turnover of the pool grows the cap x1.25
    kv_taper: bool = False  # prime-rl's later revision: taper the growth with KV usage
    taper_growth: float = 1.20  # that revision: the multiplier at KV usage 0
    taper_end_usage: float = 0.8  # that revision: KV usage where the multiplier reaches 1.00
    soft_kv_usage: float = 0.6  # prime-rl: KV usage above this is a soft signal
    queue_ratio: float = 0.5  # prime-rl: capacity queue above this share of running...
    queue_polls: int = 6  # ...for this many consecutive polls is queue overload
    trim_kv_usage: float = 0.8  # prime-rl: trim above this KV usage
    trim_target_usage: float = 0.7  # prime-rl: a trim sets cap = inflight x 0.7 / usage
    shed_kv_usage: float = 0.9  # prime-rl: above this a trim also cancels the excess
    trim_hysteresis_polls: int = 6  # prime-rl: no trim within 6 polls of the previous one
    preemption_factor: float = 0.8  # prime-rl: a preemption cuts to 0.8 x inflight
    queue_factor: float = 0.9  # prime-rl: queue overload cuts to 0.9 x inflight
    escalated_factor: float = 0.5  # prime-rl: a cut soon after a drain release cuts to 0.5
    escalation_polls: int = 6  # prime-rl: "soon" is within 6 polls of the release

    def __post_init__(self) -> None:
        check_range("growth", self.growth, 1.0, 4.0)
        check_range("taper_growth", self.taper_growth, 1.0, 4.0)
        for name in ("taper_end_usage", "soft_kv_usage", "trim_kv_usage", "shed_kv_usage"):
            check_range(name, getattr(self, name), 0.01, 1.0)
        check_range("trim_target_usage", self.trim_target_usage, 0.01, self.trim_kv_usage)
        check_range("queue_ratio", self.queue_ratio, 0.0, 100.0)
        for name in ("preemption_factor", "queue_factor", "escalated_factor"):
            check_range(name, getattr(self, name), 0.01, 1.0)
        for name in ("queue_polls", "trim_hysteresis_polls", "escalation_polls"):
            check_range(name, getattr(self, name), 1, 1000)

    def multiplier(self, kv_usage: float) -> float:
        """Growth per turnover; with the taper, it shrinks linearly to 1.0 as KV usage rises."""
        if not self.kv_taper:
            return self.growth
        headroom = max(0.0, 1.0 - kv_usage / self.taper_end_usage)
        return 1.0 + (self.taper_growth - 1.0) * headroom


class ReferencePolicy:
    """Measured AIMD: probe upward on completions, back off on what the engines report.

    Signal per poll, worst wins: HARD when an engine preempted or the capacity queue stayed
    above ``queue_ratio`` x running for ``queue_polls`` polls; SOFT when an engine kept requests
    waiting on two polls in a row or KV usage passed ``soft_kv_usage``; CLEAR otherwise.

    Growth: a CLEAR poll with an empty capacity queue allows ``growth`` per full turnover of the
    pool (the controller spreads it over completions as growth ** (1 / n)).

    Trim: KV usage above ``trim_kv_usage`` sets cap = inflight x ``trim_target_usage`` / usage,
    at most once per ``trim_hysteresis_polls``; above ``shed_kv_usage`` the excess is cancelled.

    Cut: a HARD poll sets cap = ``preemption_factor`` (or ``queue_factor``) x inflight and sheds
    the excess; within ``escalation_polls`` of a drain release the factor is
    ``escalated_factor``, because pressure that returns that fast means the last cut was short.
    """

    name: ClassVar[str] = "reference"
    rescaled: ClassVar[bool] = True

    def __init__(self, config: ReferenceConfig | None = None) -> None:
        self.config = config or ReferenceConfig()
        self._overload = OverloadTracker(
            queue_ratio=self.config.queue_ratio, queue_polls=self.config.queue_polls
        )
        self._trim_rest = TrimRest(self.config.trim_hysteresis_polls)
        self._last: tuple[Overload, PollSummary] | None = None

    def read(self, poll: PollSummary, pool: PoolView) -> Reading:
        overload = self._overload.update(poll, draining=pool.draining)
        self._last = (overload, poll)
        self._trim_rest.tick()
        signal, cause = classify(overload, poll, self.config.soft_kv_usage)
        clear = signal is Signal.CLEAR and poll.waiting_capacity == 0
        growth = self.config.multiplier(poll.max_kv_usage) if clear else 1.0
        return Reading(signal, cause, growth, overload_figures(overload, poll))

    def propose(self, reading: Reading, pool: PoolView) -> Proposal | None:
        if self._last is None:
            return None
        overload, poll = self._last
        if overload.hard:
            return cut_proposal(overload, pool, self.config, self._overload)
        return self._trim(poll, pool)

    def _trim(self, poll: PollSummary, pool: PoolView) -> Proposal | None:
        cfg = self.config
        usage = poll.max_kv_usage
        if usage <= cfg.trim_kv_usage or not self._trim_rest.rested:
            return None
        level = pool.inflight * cfg.trim_target_usage / usage
        if level >= pool.level:
            return None
        self._trim_rest.trimmed()
        detail = f"inflight {pool.inflight} x {cfg.trim_target_usage} / kv {usage:.3f}"
        return Proposal(
            DecisionKind.TRIM, level, usage > cfg.shed_kv_usage, Cause.KV_PRESSURE, detail
        )

    def pool_changed(self, factor: float) -> None:
        """Nothing it keeps is a level of the old pool: its streaks read the engines now."""

    def paused(self) -> None:
        """Its streaks count polls it read; a pause adds none."""

    def to_json(self) -> dict[str, Any]:
        return {"overload": self._overload.to_json(), "polls_since_trim": self._trim_rest.since}

    def load_json(self, data: Mapping[str, Any]) -> None:
        self._overload.load_json(data["overload"])
        self._trim_rest.since = stored_optional_count(data, "polls_since_trim")
