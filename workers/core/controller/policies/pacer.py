"""Pacer's own policy: reach the knee fast, stop before the cliff, probe without oscillating."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from workers.core.controller.policies.base import PoolView, Proposal, Reading
from workers.core.controller.policies.frontier import Frontier
from workers.core.controller.policies.knee import Knee
from workers.core.controller.policies.kv_window import KvWindow
from workers.core.controller.policies.pacer_config import PacerConfig
from workers.core.controller.policies.probe import ThroughputProbe
from workers.core.controller.policies.reductions import TrimRest, cut_proposal
from workers.core.controller.policies.signals import Overload, OverloadTracker, overload_figures
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal
from workers.core.validation import stored_count, stored_optional_count, stored_optional_number

HOLD_TURNOVERS = 1.0  # after a flat probe, grow again only after one epoch at the frontier


class PacerPolicy:
    """Measured growth with early brakes, a dead band, and a memory of where the cliff was.

    Reading, worst wins:

    - HARD: the capacity queue above ``queue_ratio`` x running for ``confirm_polls`` polls, or a
      preemption that no measurement excused (below). Cut to ``cut_factor`` x inflight (its
      cube when it comes within ``escalation_polls`` of a drain release), shed the excess, and
      remember the pool size as the knee.
    - Past the KV target (KV at or over it, or preempting), the throughput probe decides, not the KV
      line: while the last turnover epoch ran a larger pool and throughput followed, the reading is
      CLEAR (throughput rising) and the cap grows by ``frontier_growth`` a turnover; preemptions, KV
      pressure, a queue and waiting engines are then the price of a fuller engine that still pays.
      The largest pool that paid is the frontier: at or under it, preemptions and KV pressure are
      held, not cut. A flat verdict (two epochs of the larger pool: the probe's first flat epoch is
      only a suspect, held on trial for the next) trims back to the smaller pool that produced as
      much (nothing shed), which becomes the frontier, and holds one epoch there
      (``HOLD_TURNOVERS``). Under the frontier the cap grows back to it by ``frontier_growth`` a
      turnover, through the price. A cut whose smaller pool then lost throughput in proportion (the
      probe's ``larger_paid``) with KV still at the target shows the pool it cut paid: that pool
      becomes the frontier and the cut's knee is dropped, so a policy that braked on cheap
      preemptions before the probe had a verdict climbs back. The verdict needs a whole epoch of the
      larger pool, so the first time a pool the probe can judge (a step over its anchor) crosses the
      KV target or the trim line, preempts or evicts, it is on trial (SOFT, probing): held, neither
      trimmed nor cut, for the epoch in progress and the next, and their verdict decides. A frontier
      lasts as long as a knee (``knee_memory_turnovers``); one still holding the pool past the KV
      target is then rechecked a growth step under it, one that no longer does is forgotten
      (``Frontier``). A recheck that keeps the frontier grows back to it, judged as any growth is,
      so where a larger pool now pays it carries on past.
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
        self._frontier = Frontier(
            memory=cfg.knee_memory_turnovers, growth=cfg.frontier_growth, step=cfg.probe_step
        )
        self._last: tuple[Overload, PollSummary, Signal, Cause] | None = None

    def read(self, poll: PollSummary, pool: PoolView) -> Reading:
        cfg = self.config
        overload = self._overload.update(poll, draining=pool.draining)
        self._judge_epoch(poll, pool)
        self._frontier.judge_recheck(self._probe, pool)
        self._trim_rest.tick()
        self._knee.observe(poll, pool)
        self._kv_streak = self._kv_streak + 1 if poll.max_kv_usage > cfg.trim_kv_usage else 0
        self._recent_kv.add(poll)
        # The window, not the poll: one scrape between two bursts must not forget a frontier.
        pressed = poll.preemptions > 0 or self._recent_kv.highest() >= cfg.target_kv_usage
        self._frontier.age(pool.turnover, self._probe.last, pressed=pressed)
        queue_rising = 0 < self._queue_before < poll.waiting_capacity
        self._queue_before = poll.waiting_capacity
        self._frontier.follow(pool.inflight)
        frontier = self._frontier.level
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
        trim = self._frontier.recheck_trim(self._probe, pool) or self._frontier.settle_trim(pool)
        if trim is not None:
            return trim
        if cause is Cause.KV_PRESSURE or cause is Cause.PREFIX_EVICTION:
            return self._trim(cause, poll, pool)
        return None

    def _judge_epoch(self, poll: PollSummary, pool: PoolView) -> None:
        """Close the turnover epoch if one ended, and learn from the probe's verdict. A poll
        whose pool count is in doubt (a run sharing the engines is overdue) is no measurement:
        its epoch is discarded, as one with a stale engine's poll is. A dead host's claim
        states the episodes its engines aborted until it goes stale, and a pool that seems to
        hold them makes only the live ones' tokens: in virtual time, ten seconds after a
        death, the leader read 75 in flight as making no more than 51 and trimmed the
        shared pool's level to 51."""
        probe = self._probe
        if not pool.counted:
            probe.interrupt()
        before = probe.anchor  # a flat verdict compares the new epoch with this one
        flat = probe.observe(poll, pool.inflight, pool.turnover)
        if flat and before is not None:
            self._hold_until = pool.turnover + HOLD_TURNOVERS
            self._frontier.settle_at(before.inflight, pool.turnover)
        elif probe.paid and probe.anchor is not None and probe.anchor is not before:
            self._frontier.raise_to(probe.anchor.inflight, pool.turnover)
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
            self._frontier.raise_to(probe.larger_paid.inflight, pool.turnover)

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
        if not past_line or self._probe.paid or self._frontier.settling:
            return False
        return self._probe.on_trial(pool.inflight, pool.turnover)

    def _excused(self, pool: PoolView) -> bool:
        """Preemptions are excused while a larger pool still pays, or with the cap at a pool
        that did (a flat epoch's trim back to it included: the excess drains as it completes,
        and cutting it on top would undo the measurement)."""
        return self._probe.paid or self._frontier.settling or self._frontier.excuses(pool.level)

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
        if self._frontier.rechecking:
            return Signal.SOFT, Cause.FRONTIER  # a step under the frontier until the verdict
        frontier = self._frontier.level
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
        if self._frontier.level is not None:
            figures["frontier"] = self._frontier.level
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
        self._frontier.scale(factor)
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
            **self._frontier.to_json(),
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
        self._frontier.load_json(data)
