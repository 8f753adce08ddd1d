"""The frontier: the largest pool shown to pay past the KV target, and the recheck that keeps
it honest.

Past the KV target the throughput probe, not a KV line, says how large the pool may be. The
largest pool whose epoch paid is the frontier: at or under it, preemptions and KV pressure are
the price of a fuller engine that still pays, held rather than cut. A flat verdict makes the
smaller pool that produced as much the frontier, and the cap *settles* back to it (nothing
shed: the excess drains as it completes). Such a frontier (and one a recheck moved down)
also excuses a probe step over it: the larger pool was measured there and cost nothing, so a
preemption after growth crept back into that step is not a cut. Over an hour this held W11's
long answers at 190 where cuts had taken it down and back 18 times (4 direction changes;
steady ratio 1.045 -> 1.065). Over a frontier that paid, the next step is unmeasured, and a
preemption there still cuts.

A frontier is believed as long as a knee (``memory`` turnovers), since a workload that changed
must show again that it pays. One that still holds the pool past the target is then
*rechecked*: the cap steps one ``growth`` under it, and the smaller pool's first whole epoch is
compared with the frontier's last. Lost throughput in proportion: the frontier stands; else the
smaller pool is the frontier. One that no longer holds the pool past the target is forgotten.
Forgetting one that still held it made its next preemption a cut: on W5 run for an hour, 226
was cut and escalated to 71 at 2,400 s, and ran a tenth slower from then on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from workers.core.controller.policies.base import PoolView, Proposal, whole_episodes
from workers.core.controller.policies.probe import EpochRate, ThroughputProbe
from workers.core.decisions import Cause, DecisionKind
from workers.core.validation import (
    stored_bool,
    stored_fields,
    stored_number,
    stored_optional_number,
)

RECHECK_TURNOVERS = 3.0  # a recheck's step down drains in one epoch and is judged on the next


class Frontier:
    """Where the pool last paid past the KV target, how old that is, and its recheck."""

    def __init__(self, *, memory: float, growth: float, step: float) -> None:
        self._memory = memory  # turnovers a frontier is believed without a recheck
        self._growth = growth  # a recheck steps the cap this factor under the frontier
        self._step = step  # the probe's step: an epoch this close to the frontier ran at it
        self.level: float | None = None
        self._since = 0.0  # the turnover it was set or confirmed at
        self.settling = False  # a flat epoch trimmed the cap to the frontier; the pool drains
        self._flat = False  # a flat epoch or a recheck set it: the step over it cost nothing
        self._recheck: EpochRate | None = None  # the frontier's epoch a recheck compares with
        self._recheck_until = 0.0  # ...and the turnover it gives up at

    @property
    def rechecking(self) -> bool:
        return self._recheck is not None

    def settle_at(self, level: float, turnover: float) -> None:
        """A flat verdict: the smaller pool of ``level`` produced as much, so it is the frontier
        and the cap trims back to it."""
        self.level, self._since, self.settling, self._flat = level, turnover, True, True

    def raise_to(self, level: float, turnover: float) -> None:
        """A pool of ``level`` paid: the frontier is the largest that did."""
        if self.level is None or level > self.level:
            self._flat = False
        self.level, self._since = max(self.level or 0.0, level), turnover

    def follow(self, inflight: int) -> None:
        """Settling ends once the pool drained to the frontier (or the frontier is gone)."""
        self.settling = self.settling and self.level is not None and inflight > self.level

    def excuses(self, level: float) -> bool:
        """A cap at a pool that paid: the frontier is a mean over an epoch, and the cap that
        ran it was the next whole episode (a probe step further for a flat epoch's frontier).
        The cap is the level's whole part, so a level a fraction over that episode holds the
        same pool: the demo run cut 231 to 196 for a level of 231.4 over a frontier of 230.8."""
        if self.level is None:
            return False
        limit = self.level * (1.0 + self._step) if self._flat else self.level
        return whole_episodes(level) <= math.ceil(limit)

    def age(self, turnover: float, last: EpochRate | None, *, pressed: bool) -> None:
        """Past its memory, recheck a frontier that holds the pool past the KV target
        (``pressed``), as soon as an epoch at it closes (within ``RECHECK_TURNOVERS``), or
        forget it; a recheck with no verdict by then lapses, and the frontier with it."""
        if self.level is None:
            return
        if self._recheck is not None:
            if turnover > self._recheck_until:
                self.level = self._recheck = None
            return
        age = turnover - self._since - self._memory
        if age <= 0:
            return
        at_frontier = last is not None and last.inflight * (1.0 + self._step) >= self.level
        if pressed and last is not None and at_frontier and last.rate > 0:
            self._recheck, self._recheck_until = last, turnover + RECHECK_TURNOVERS
        elif not pressed or age > RECHECK_TURNOVERS:
            self.level = None

    def judge_recheck(self, probe: ThroughputProbe, pool: PoolView) -> None:
        """Once an epoch a whole step under the frontier closed: the frontier stands if the
        smaller pool lost throughput in proportion, else the smaller pool is the frontier."""
        recheck, smaller = self._recheck, probe.last
        if recheck is None or smaller is None:
            return
        if smaller.inflight * (1.0 + self._step) > recheck.inflight:
            return  # an epoch at the frontier, or the one the pool drained in
        if not probe.lost(recheck, smaller):
            # The cap it ran at, not the epoch's mean under it: the pool is held at the cap.
            self.level, self._flat = max(smaller.inflight, pool.level), True
        self._since = pool.turnover
        self._recheck = None

    def recheck_trim(self, probe: ThroughputProbe, pool: PoolView) -> Proposal | None:
        """The step under the frontier a recheck measures, asked until the next epoch closes:
        a cap held over the step (``min_inflight``) is not asked again every poll, and the
        recheck lapses for want of a verdict."""
        frontier = self.level
        if self._recheck is None or frontier is None or probe.last is not self._recheck:
            return None
        step_under = frontier / self._growth
        if step_under >= pool.level:
            return None
        detail = (
            f"frontier {frontier:.0f} is {self._memory:g} turnovers old: one step under it, "
            "to see whether it still pays"
        )
        return Proposal(DecisionKind.TRIM, step_under, False, Cause.FRONTIER, detail)

    def settle_trim(self, pool: PoolView) -> Proposal | None:
        """After a flat epoch, the cap back to the smaller pool that produced as much."""
        frontier = self.level
        if not self.settling or frontier is None or frontier >= pool.level:
            return None
        detail = f"inflight {pool.inflight} bought no more tokens/s than {frontier:.0f}"
        return Proposal(DecisionKind.TRIM, frontier, False, Cause.THROUGHPUT_FLAT, detail)

    def scale(self, factor: float) -> None:
        """The pool's capacity changed by ``factor``: a pool that paid scales with it; what was
        measured on the old pool (a settling trim, a recheck's epoch) is dropped."""
        if self.level is not None:
            self.level *= factor
        self.settling = False
        self._recheck = None

    def to_json(self) -> dict[str, Any]:
        recheck = self._recheck
        stored = None if recheck is None else [recheck.inflight, recheck.rate, self._recheck_until]
        return {
            "frontier": self.level,
            "frontier_turnover": self._since,
            "settling": self.settling,
            "frontier_flat": self._flat,
            "recheck": stored,
        }

    def load_json(self, data: Mapping[str, Any]) -> None:
        self.level = stored_optional_number(data, "frontier", low=0.0)
        self._since = stored_number(data, "frontier_turnover", low=0.0)
        self.settling = stored_bool(data, "settling")
        # absent from states saved before it: a paid frontier's narrower excuse
        self._flat = "frontier_flat" in data and stored_bool(data, "frontier_flat")
        # absent from states saved before rechecks
        recheck = stored_fields(data.get("recheck"), "recheck", ("inflight", "rate", "until"))
        self._recheck = None if recheck is None else EpochRate(recheck[0], recheck[1])
        self._recheck_until = 0.0 if recheck is None else recheck[2]
