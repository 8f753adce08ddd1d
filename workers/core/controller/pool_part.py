"""A run's part of a pool of engines other runs share (``workers.core.sharing``), as its
controller holds it between two looks at the pool."""

from __future__ import annotations

from dataclasses import dataclass, replace

from workers.core.controller.policies.base import whole_episodes

# A part that moves by less than this (relative) while the pool's runs, their terms and its
# leader stay the same is not taken: every look re-splits the pool from episodes in flight
# that move by a group at a time, and a cap moved (and a decision recorded) every look for
# it would bury the changes that matter. 5 % of a part is within the 10 % of equal KV share
# a fair split is held to.
SHARE_CHANGE = 0.05


@dataclass(frozen=True, slots=True)
class PoolPart:
    """The run holds ``fraction`` of the pool's level. The leader's policy sizes that level
    (in the pool's episodes) and the others follow it from look to look."""

    fraction: float  # its part of the pool's level, in (0, 1]
    leads: bool  # its policy sizes the pool; the other runs follow its level
    level: float  # the pool's level at the look: the leader's
    most: int  # the highest level the pool may have (its runs' max_inflight, summed)
    others_inflight: int  # episodes the other runs hold in flight, by their claims
    others_may_hold: int  # ...or may hold by their parts, if more: their claims lag a look
    terms: tuple[tuple[int, float, int], ...] = ()  # each run's (id, share, priority)
    held_back: int = 0  # of its part, what the runs it displaces have not freed yet
    counted: bool = True  # the other runs' episodes are known: every claim renewed on time

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"a pool part's fraction must be in (0, 1], got {self.fraction!r}")
        if not self.level >= 0 or self.most < 1:
            raise ValueError(f"a pool's level must be >= 0 and its most >= 1, got {self!r}")
        if min(self.others_inflight, self.others_may_hold) < 0:
            raise ValueError(f"other runs' episodes must be >= 0, got {self!r}")

    def of(self, level: float) -> int:
        """The run's part of ``level``, in whole episodes: its ceiling."""
        return whole_episodes(level * self.fraction)

    def cap(self, level: float) -> int:
        """Its part of ``level`` less what it is held back: what it may hold now."""
        return self.of(level) - self.held_back

    def after(self, new: PoolPart) -> PoolPart:
        """``new`` as it is taken while this part is in force: with this fraction kept when
        the pool is the same (runs, terms, leader) and the fraction moved by less than
        ``SHARE_CHANGE``. What it is held back is taken as it is: it must shrink as fast as
        the runs it displaces free their episodes."""
        same = self.terms == new.terms and self.leads == new.leads
        if same and abs(new.fraction - self.fraction) < SHARE_CHANGE * self.fraction:
            return replace(new, fraction=self.fraction)
        return new
