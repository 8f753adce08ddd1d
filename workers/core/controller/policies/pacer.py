"""Pacer's own policy: reach the knee fast, stop before the cliff, probe without oscillating."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from workers.core.controller.policies.base import PoolView, Proposal, Reading
from workers.core.controller.policies.knee import Knee
from workers.core.controller.policies.kv_window import KvWindow
from workers.core.controller.policies.pacer_config import PacerConfig
from workers.core.controller.policies.probe import EpochRate, ThroughputProbe
from workers.core.controller.policies.reductions import TrimRest, cut_proposal
from workers.core.controller.policies.signals import Overload, OverloadTracker, overload_figures
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal
from workers.core.validation import (
    stored_bool,
    stored_count,
    stored_number,
    stored_optional_count,
    stored_optional_number,
)

HOLD_TURNOVERS = 1.0  # after a flat probe, grow again only after one epoch at the frontier
RECHECK_TURNOVERS = 3.0  # a recheck's step down drains in one epoch and is judged on the next


class PacerPolicy:
    """Measured growth with early brakes, a dead band, and a memory of where the cliff was.

    Reading, worst wins:

    - HARD: the capacity queue above ``queue_ratio`` x running for ``confirm_polls`` polls, or a
      preemption that no measurement excused (below). Cut to ``cut_factor`` x inflight (its
      cube when it comes within ``escalation_polls`` of a drain release), shed the excess, and
      remember the pool size as the knee.
    - Past the KV target (KV at or over it, or preempting), the throughput probe decides, not the
      KV line: while the last turnover epoch ran a larger pool and throughput followed, the
      reading is CLEAR (throughput rising) and the cap grows by ``frontier_growth`` a turnover;
      preemptions, KV pressure, a queue and waiting engines are then the price of a fuller
      engine that still pays. The largest pool that paid is the frontier: at or under it,
      preemptions and KV pressure are held, not cut. A flat epoch trims back to the smaller
      pool that produced as much (nothing shed), which becomes the frontier, and holds one
      epoch there (``HOLD_TURNOVERS``). Under the frontier the cap grows back to it by
      ``frontier_growth`` a turnover, through the price. A cut whose smaller pool then lost
      throughput in proportion (the probe's ``larger_paid``) with KV still at the target shows
      the pool it cut paid: that pool becomes the frontier and the cut's knee is dropped, so a
      policy that braked on cheap preemptions before the probe had a verdict climbs back. The
      verdict needs a whole epoch of the larger pool, so the first time a pool the probe can
      judge (a step over its anchor) crosses the KV target or the trim line, preempts or
      evicts, it is on trial (SOFT, probing): held, neither trimmed nor cut, for the epoch in
      progress and the next, and their verdict decides. A frontier lasts as long as a knee
      (``knee_memory_turnovers``), since a workload that changed must show again that it
      pays: one still holding the pool past the KV target is then *rechecked*, the cap trimmed
      one growth step under it (nothing shed, preemptions still held) and the smaller pool's
      first whole epoch compared with the frontier's last. Lost throughput in proportion: the
      frontier stands and the cap grows back to it (that return is judged as any growth is,
      so where a larger pool now pays it carries on past); else the smaller pool is the
      frontier. One no longer holding the pool past the target is forgotten.
    - SOFT with a trim: KV above ``trim_kv_usage`` for ``confirm_polls`` polls, or above
      ``shed_kv_usage`` once (cap = inflight x target / usage, the excess shed in the latter
      case only); or the prefix-cache hit rate fell below ``hit_drop`` x its clear
      baseline while KV is above ``eviction_kv_usage``: idle multi-turn contexts are being
      evicted, the first step of the cliff (cap = ``knee_margin`` x inflight, nothing shed;
      the baseline is then relearned, so a workload whose hit rate fell for good costs one trim;
      the pool it trimmed is a knee, as a cut's is, so growth does not climb straight back
      into the evictions).
    - SOFT, hold: KV between ``target_kv_usage`` and the trim line (the dead band); the capacity
      queue growing from one poll to the next; an engine waiting on two polls in a row; or a
      throughput probe that found the engines saturated (after its trim).
    - SOFT, knee: for ``knee_memory_turnovers`` after a cut, the cap stops at ``knee_margin``
      x the pool that overloaded (the knee), like TCP's slow-start threshold after a loss.
    - CLEAR, growth per turnover, on the highest KV usage of the last ``confirm_polls``
      polls with one more episode's share of its engine added: below ``cruise_kv_usage``,
      slow start, target / kv (the pool that puts KV on the target after one turnover), at
      most ``max_growth`` and at least ``probe_growth``;
      from cruise to target, ``probe_growth`` tapering linearly to 1.0, so the cap settles
      into the dead band instead of crossing the trim line; never past the knee's ceiling;
      nothing while any request waits for capacity, nor on a poll where none of the pool's
      episodes was running (its KV says nothing of theirs: a real engine's first poll
      came before any request reached it, and x4 of it led a cut cascade).

    Why it should beat the reference: it ramps at up to x4 per turnover instead of x1.25 (a
    pessimistic start costs a few turnovers, not dozens); past its cruise line it goes where
    delivered throughput says, not where a KV line says: the best fixed cap of a workload
    whose recompute is cheap runs KV full with preemptions, while one whose curve falls past
    the knee stops the probe early; without that evidence, the dead band between growth's end
    and the trim line removes the grow-trim sawtooth; it brakes on signals that come before
    preemptions (queue rising, prefix evictions, saturation), so cuts are rare; after a cut it
    stays under the old knee instead of overshooting it again; and one scrape that catches an
    engine idle cannot double the cap.
    """

    name: ClassVar[str] = "pacer"
    rescaled: ClassVar[bool] = True

    def __init__(self, config: PacerConfig | None = None) -> None:
        self.config = cfg = config or PacerConfig()
        self._overload = OverloadTracker(queue_ratio=cfg.queue_ratio, queue_polls=cfg.confirm_polls)
        self._probe = ThroughputProbe(step=cfg.probe_step, flat_gain=cfg.flat_gain)
        self._queue_before = 0
        self._kv_streak = 0
        self._hit_baseline: float | None = None
        self._knee = Knee(
            margin=cfg.knee_margin, memory=cfg.knee_memory_turnovers, clear_kv=cfg.cruise_kv_usage
        )
        self._recent_kv = KvWindow(cfg.confirm_polls)
        self._hold_until: float | None = None
        self._trim_rest = TrimRest(cfg.confirm_polls)
        self._frontier: float | None = None  # the largest pool shown to pay past the KV target
        self._frontier_turnover = 0.0
        self._settling = False  # a flat epoch trimmed the cap to the frontier; the pool drains
        self._recheck: EpochRate | None = None  # the frontier's epoch a recheck compares with
        self._recheck_until = 0.0  # ...and the turnover it gives up at
        self._last: tuple[Overload, PollSummary, Signal, Cause] | None = None

    def read(self, poll: PollSummary, pool: PoolView) -> Reading:
        cfg = self.config
        overload = self._overload.update(poll, draining=pool.draining)
        self._judge_epoch(poll, pool)
        self._judge_recheck(pool)
        self._trim_rest.tick()
        self._knee.observe(poll, pool)
        self._kv_streak = self._kv_streak + 1 if poll.max_kv_usage > cfg.trim_kv_usage else 0
        self._recent_kv.add(poll)
        self._age_frontier(poll, pool)
        queue_rising = 0 < self._queue_before < poll.waiting_capacity
        self._queue_before = poll.waiting_capacity
        frontier = self._frontier
        self._settling = self._settling and frontier is not None and pool.inflight > frontier
        # With a knee known, regrowth heads for a size that overloaded: price it cautiously.
        kv = self._recent_kv.one_more(
            pool.inflight, poll.engines, by_running=self._knee.level is not None
        )
        evicting = self._evicting(poll)
        trial = self._on_trial(poll, pool, kv, evicting)
        excused = trial or self._excused(pool)
        if excused:
            overload = replace(overload, preempted=False, queue_overload=False)
        signal, cause = self._classify(
            overload, poll, queue_rising, pool, kv, evicting, trial, excused
        )
        self._last = (overload, poll, signal, cause)
        growth, ceiling = 1.0, self._knee.ceiling
        if cause is Cause.THROUGHPUT_RISING:
            growth = cfg.frontier_growth
        elif signal is Signal.CLEAR and cause is Cause.FRONTIER and frontier is not None:
            growth = cfg.frontier_growth
            ceiling = frontier if ceiling is None else min(ceiling, frontier)
        elif signal is Signal.CLEAR:
            self._learn_hit_rate(poll)
            if poll.waiting_capacity == 0 and (poll.running or not pool.inflight):
                growth = self._growth(kv)
        figures = overload_figures(overload, poll)
        figures.update(self._figures(poll))
        return Reading(signal, cause, growth, figures, ceiling)

    def propose(self, reading: Reading, pool: PoolView) -> Proposal | None:
        if self._last is None:
            return None
        overload, poll, signal, cause = self._last
        if signal is Signal.HARD:
            return self._cut(overload, pool)
        frontier = self._frontier
        recheck = self._recheck
        if recheck is not None and frontier is not None and self._probe.last is recheck:
            # Until the next epoch closes: a cap held over the step (``min_inflight``) is
            # not asked again every poll, and the recheck lapses for want of a verdict.
            step_under = frontier / self.config.frontier_growth
            if step_under < pool.level:
                detail = (
                    f"frontier {frontier:.0f} is {self.config.knee_memory_turnovers:g} "
                    f"turnovers old: one step under it, to see whether it still pays"
                )
                return Proposal(DecisionKind.TRIM, step_under, False, Cause.FRONTIER, detail)
        if self._settling and frontier is not None and frontier < pool.level:
            detail = f"inflight {pool.inflight} bought no more tokens/s than {frontier:.0f}"
            flat = Cause.THROUGHPUT_FLAT
            return Proposal(DecisionKind.TRIM, frontier, False, flat, detail)
        if cause is Cause.KV_PRESSURE or cause is Cause.PREFIX_EVICTION:
            return self._trim(cause, poll, pool)
        return None

    def _judge_epoch(self, poll: PollSummary, pool: PoolView) -> None:
        """Close the turnover epoch if one ended, and learn from the probe's verdict."""
        probe = self._probe
        before = probe.anchor  # a flat verdict compares the new epoch with this one
        flat = probe.observe(poll, pool.inflight, pool.turnover)
        if flat and before is not None:
            self._hold_until = pool.turnover + HOLD_TURNOVERS
            self._frontier = before.inflight
            self._frontier_turnover = pool.turnover
            self._settling = True
        elif probe.paid and probe.anchor is not None and probe.anchor is not before:
            self._frontier = max(self._frontier or 0.0, probe.anchor.inflight)
            self._frontier_turnover = pool.turnover
        elif (
            probe.larger_paid is not None
            and self._knee.level is not None
            and poll.max_kv_usage >= self.config.target_kv_usage
            and poll.waiting_capacity == 0
        ):
            # A cut shrank the pool and throughput fell with it, though the smaller pool still
            # filled the cache to the target: the preemptions or the queue the cut answered
            # cost less than the episodes it took away, so the pool before it is a frontier
            # and its knee is wrong. (A smaller pool that left the cache short would produce
            # less anyway, and one still queueing for capacity runs the engine as full as the
            # larger did, so a difference between them is noise: neither says what
            # preempting costs.)
            self._knee.drop()
            self._frontier = max(self._frontier or 0.0, probe.larger_paid.inflight)
            self._frontier_turnover = pool.turnover

    def _age_frontier(self, poll: PollSummary, pool: PoolView) -> None:
        """Past its memory, recheck a frontier that holds the pool past the KV target, as soon
        as an epoch at it closes (within ``RECHECK_TURNOVERS``), or forget it. Forgetting one
        that held the pool past the target made its next preemption a cut: on W5 run for an
        hour, 226 was cut and escalated to 71 at 2,400 s, and ran a tenth slower from then on."""
        frontier, cfg = self._frontier, self.config
        if frontier is None:
            return
        if self._recheck is not None:
            if pool.turnover > self._recheck_until:
                self._frontier = self._recheck = None
            return
        age = pool.turnover - self._frontier_turnover - cfg.knee_memory_turnovers
        if age <= 0:
            return
        last = self._probe.last
        # The window, not the poll: one scrape between two bursts must not forget it.
        pressed = poll.preemptions > 0 or self._recent_kv.highest() >= cfg.target_kv_usage
        at_frontier = last is not None and last.inflight * (1.0 + cfg.probe_step) >= frontier
        if pressed and last is not None and at_frontier and last.rate > 0:
            self._recheck, self._recheck_until = last, pool.turnover + RECHECK_TURNOVERS
        elif not pressed or age > RECHECK_TURNOVERS:
            self._frontier = None

    def _judge_recheck(self, pool: PoolView) -> None:
        """Once an epoch a whole step under the frontier's closed: the frontier stands if the
        smaller pool lost throughput in proportion, else the smaller pool is the frontier."""
        recheck, smaller = self._recheck, self._probe.last
        if recheck is None or smaller is None:
            return
        if smaller.inflight * (1.0 + self.config.probe_step) > recheck.inflight:
            return  # an epoch at the frontier, or the one the pool drained in
        if not self._probe.lost(recheck, smaller):
            # The cap it ran at, not the epoch's mean under it: the pool is held at the cap.
            self._frontier = max(smaller.inflight, pool.level)
        self._frontier_turnover = pool.turnover
        self._recheck = None

    def _on_trial(self, poll: PollSummary, pool: PoolView, kv: float, evicting: bool) -> bool:
        """Past the KV target or the trim line, preempting or evicting, with no verdict on the
        pool yet, it is held for the probe to judge (``ThroughputProbe.on_trial``) instead of
        trimmed or cut: on vLLM-CPU the KV trims took a pool of 19 back to 16 in less than an
        epoch, again and again, and pacer never learnt whether the fuller engine paid."""
        cfg = self.config
        past_line = (
            poll.preemptions > 0
            or evicting
            or kv >= cfg.target_kv_usage
            or poll.max_kv_usage > cfg.trim_kv_usage
        )
        if not past_line or self._probe.paid or self._settling:
            return False
        return self._probe.on_trial(pool.inflight, pool.turnover)

    def _excused(self, pool: PoolView) -> bool:
        """Preemptions are excused while a larger pool still pays, or with the cap at a pool
        that did (a flat epoch's trim back to it included: the excess drains as it completes,
        and cutting it on top would undo the measurement)."""
        if self._probe.paid or self._settling:
            return True
        # The frontier is a mean over an epoch; the cap that ran it was the next whole episode.
        return self._frontier is not None and pool.level <= math.ceil(self._frontier)

    def _classify(
        self,
        overload: Overload,
        poll: PollSummary,
        queue_rising: bool,
        pool: PoolView,
        kv: float,
        evicting: bool,
        trial: bool,
        excused: bool,
    ) -> tuple[Signal, Cause]:
        """``kv`` is the recent KV priced with one more episode; ``trial``: the pool is on the
        probe's trial (``ThroughputProbe.on_trial``), held past the line until its verdict;
        ``excused``: its preemptions are (the trial, or ``_excused``)."""
        cfg = self.config
        if overload.hard:
            return Signal.HARD, overload.hard_cause
        pressed = poll.preemptions > 0 or evicting
        if (pressed or kv >= cfg.cruise_kv_usage) and self._probe.paid:
            return Signal.CLEAR, Cause.THROUGHPUT_RISING
        if trial:
            return Signal.SOFT, Cause.PROBING
        if self._recheck is not None:
            return Signal.SOFT, Cause.FRONTIER  # a step under the frontier until the verdict
        frontier = self._frontier
        if (pressed or kv >= cfg.target_kv_usage) and frontier and pool.level < frontier:
            return Signal.CLEAR, Cause.FRONTIER  # back up to a pool shown to pay, through its price
        if (pressed or kv >= cfg.target_kv_usage) and excused:
            return Signal.SOFT, Cause.FRONTIER
        if evicting:
            return Signal.SOFT, Cause.PREFIX_EVICTION
        if poll.max_kv_usage > cfg.shed_kv_usage or self._kv_streak >= cfg.confirm_polls:
            return Signal.SOFT, Cause.KV_PRESSURE
        if poll.max_kv_usage >= cfg.target_kv_usage:
            return Signal.SOFT, Cause.KV_HIGH
        if queue_rising:
            return Signal.SOFT, Cause.QUEUE_RISING
        if overload.waiting_twice:
            return Signal.SOFT, Cause.WAITING
        if self._hold_until is not None and pool.turnover < self._hold_until:
            return Signal.SOFT, Cause.THROUGHPUT_FLAT
        ceiling = self._knee.ceiling
        if ceiling is not None and pool.level >= ceiling:
            return Signal.SOFT, Cause.KNEE
        return Signal.CLEAR, Cause.CLEAR

    def _evicting(self, poll: PollSummary) -> bool:
        hit, baseline = poll.prefix_hit_rate, self._hit_baseline
        return (
            hit is not None
            and baseline is not None
            and poll.max_kv_usage > self.config.eviction_kv_usage
            and hit < self.config.hit_drop * baseline
        )

    def _learn_hit_rate(self, poll: PollSummary) -> None:
        """The baseline follows clear polls with weight 1 / ``confirm_polls``: a hit rate that
        held as long as a KV line must is mostly learnt, one odd poll barely moves it."""
        hit = poll.prefix_hit_rate
        if hit is None:
            return
        if self._hit_baseline is None:
            self._hit_baseline = hit
        else:
            weight = 1 / self.config.confirm_polls
            self._hit_baseline += weight * (hit - self._hit_baseline)

    def _growth(self, kv_usage: float) -> float:
        cfg = self.config
        if kv_usage < cfg.cruise_kv_usage:
            # Within a turnover every episode is replaced, so KV scales with the pool: x target
            # / kv per turnover is the pool whose KV the measurement puts on the target.
            headroom = cfg.target_kv_usage / max(kv_usage, cfg.target_kv_usage / cfg.max_growth)
            return max(cfg.probe_growth, headroom)
        if kv_usage >= cfg.target_kv_usage:
            return 1.0
        band = cfg.target_kv_usage - cfg.cruise_kv_usage
        return 1.0 + (cfg.probe_growth - 1.0) * (cfg.target_kv_usage - kv_usage) / band

    def _cut(self, overload: Overload, pool: PoolView) -> Proposal:
        self._knee.set(float(pool.inflight), pool.turnover)
        return cut_proposal(overload, pool, self.config, self._overload)

    def _trim(self, cause: Cause, poll: PollSummary, pool: PoolView) -> Proposal | None:
        cfg = self.config
        if not self._trim_rest.rested:
            return None
        usage = poll.max_kv_usage
        if cause is Cause.KV_PRESSURE:
            level = pool.inflight * cfg.target_kv_usage / usage
            shed = usage > cfg.shed_kv_usage
            detail = f"inflight {pool.inflight} x {cfg.target_kv_usage} / kv {usage:.3f}"
        else:
            level = pool.inflight * cfg.knee_margin
            shed = False
            detail = (
                f"inflight {pool.inflight} x {cfg.knee_margin}, prefix hit "
                f"{poll.prefix_hit_rate:.3f} vs baseline {self._hit_baseline:.3f}"
            )
        if level >= pool.level:
            return None
        if cause is Cause.PREFIX_EVICTION:
            # Relearn the baseline: a workload whose hit rate dropped for good (new prompts,
            # less sharing) must cost at most one trim, not a trim every few polls.
            self._hit_baseline = None
            self._knee.set(float(pool.inflight), pool.turnover)
        self._trim_rest.trimmed()
        return Proposal(DecisionKind.TRIM, level, shed, cause, detail)

    def _figures(self, poll: PollSummary) -> dict[str, float]:
        figures: dict[str, float] = {}
        hit = poll.prefix_hit_rate
        if hit is not None:
            figures["prefix_hit_rate"] = hit
        if self._hit_baseline is not None:
            figures["prefix_hit_baseline"] = self._hit_baseline
        if self._knee.level is not None:
            figures["knee"] = self._knee.level
        if self._frontier is not None:
            figures["frontier"] = self._frontier
        anchor = self._probe.anchor
        if anchor is not None:
            figures["probe_inflight"] = anchor.inflight
            figures["probe_rate"] = anchor.rate
        return figures

    def pool_changed(self, factor: float) -> None:
        """The knee and the throughput anchor were the old pool's; the hit-rate baseline too
        (another pool caches another share). The frontier, a pool that paid, scales with the
        capacity: on W6 an engine back made 207 preempt on the two it had been cut for, and
        with no frontier to excuse it they cut twice, to 107 (steady 0.892 of the best fixed
        cap, 1.023 when the frontier followed the pool). A knee that followed held W9's new
        engine under an old, cheap overload (0.897 -> 0.825): the new pool earns its own."""
        self._knee.drop()
        self._hold_until = self._hit_baseline = None
        if self._frontier is not None:
            self._frontier *= factor
        self._settling = False
        self._recheck = None
        self._probe.forget()

    def paused(self) -> None:
        """No poll of the pause reaches ``read``: the epoch must not count it (W8's did)."""
        self._probe.interrupt()

    def to_json(self) -> dict[str, Any]:
        return {
            "overload": self._overload.to_json(),
            "probe": self._probe.to_json(),
            "queue_before": self._queue_before,
            "kv_streak": self._kv_streak,
            "hit_baseline": self._hit_baseline,
            **self._knee.to_json(),
            "hold_until": self._hold_until,
            **self._recent_kv.to_json(),
            "polls_since_trim": self._trim_rest.since,
            "frontier": self._frontier,
            "frontier_turnover": self._frontier_turnover,
            "settling": self._settling,
            "recheck": self._recheck_json(),
        }

    def load_json(self, data: Mapping[str, Any]) -> None:
        self._overload.load_json(data["overload"])
        self._probe.load_json(data["probe"])
        self._queue_before = stored_count(data, "queue_before")
        self._kv_streak = stored_count(data, "kv_streak")
        self._hit_baseline = stored_optional_number(data, "hit_baseline", low=0.0)
        self._knee.load_json(data)
        self._hold_until = stored_optional_number(data, "hold_until", low=0.0)
        self._recent_kv.load_json(data)
        self._trim_rest.since = stored_optional_count(data, "polls_since_trim")
        self._frontier = stored_optional_number(data, "frontier", low=0.0)
        self._frontier_turnover = stored_number(data, "frontier_turnover", low=0.0)
        self._settling = stored_bool(data, "settling")
        self._load_recheck(data.get("recheck"))  # absent from states saved before rechecks

    def _recheck_json(self) -> list[float] | None:
        recheck = self._recheck
        return None if recheck is None else [recheck.inflight, recheck.rate, self._recheck_until]

    def _load_recheck(self, stored: object) -> None:
        self._recheck = None
        if stored is None:
            return
        if not isinstance(stored, list) or len(stored) != 3:
            raise ValueError(f"recheck must be null or [inflight, rate, until], got {stored!r}")
        names = ("recheck inflight", "recheck rate", "recheck until")
        fields = dict(zip(names, stored, strict=True))
        inflight = stored_number(fields, "recheck inflight", low=0.0)
        rate = stored_number(fields, "recheck rate", low=0.0)
        self._recheck_until = stored_number(fields, "recheck until", low=0.0)
        self._recheck = EpochRate(inflight, rate)
