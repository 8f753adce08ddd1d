"""Runs that share engines: each run's ceiling, from what every run in the pool claims.

Each run's controller reads the engines' KV and queues, which hold the other runs' requests
too, so on its own the first run to fill a pool keeps it: a second one sees the engines busy
and never grows. The arbiter splits the pool between them instead. Every host states its run's
claim (weight, priority, what it has to run, what it holds, whether its controller would grow
or reads the engines overloaded, what the engines queue, the ceiling and the capacity it was
last given) and every host computes every ceiling from the same claims with this rule, so no
single process arbitrates and none can die and leave the pool unarbitrated.

The pool's capacity is what its runs have shown it carries: the episodes they hold, less the
requests the engines queue (those are held, not carried). While some run's controller reads the
engines overloaded (preemptions, a queue), or none would grow, that is what the engines take:
the capacity is its sum, or the one cut last time (by any host) let down by ``SHARE_MEMORY`` a
look, whichever is more, so a run that trims does not drag another's ceiling down with it, and
a pool that got slower is re-measured within minutes. While some run would grow and none is
overloaded, the pool is ``headroom`` over what they carry (or the remembered capacity, when
that is more), so the ceilings never hold back a pool with room: the policies that probe past
their KV target while throughput pays (pacer's frontier) do so in a shared pool as they would
alone. The controllers still cut for an overload themselves; a ceiling only bounds them. That
capacity is handed out by priority, highest first, and within a priority by weight, each run
getting no more than it has to run (its demand) while another wants more: a share a run does
not use is lent, and comes back as soon as its demand does. What no run wants is spread by
weight, so the ceilings always add up to the capacity.

Pure: claims in, ceilings out. Runs in a pool of one have no ceiling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# While a run would grow and none is overloaded, the pool may be this much more than its runs
# carry: the controllers' own growth in about a turnover (the reference grows 25 % a turnover).
SHARE_HEADROOM = 1.25
# The capacity remembered from the last look falls by 2 % a look (a look every poll, 5 s by
# default): halved in about three minutes, slow beside a controller's recovery
# from a trim, quick beside engines that get slower (longer answers, a smaller pool).
SHARE_MEMORY = 0.98
# A run's share (a weight) and priority, as a config or an operator gives them: a million to
# one between shares is more than any split a person means; priorities are ranks, not sizes.
SHARE_RANGE = (1e-3, 1e3)
PRIORITY_RANGE = (-100, 100)


@dataclass(frozen=True, slots=True)
class Claim:
    """What one run's host states for the pool at one arbitration."""

    run_id: int
    engines: frozenset[str]  # the engines' base URLs: the same engine under any name
    weight: float  # concurrency.share, > 0
    priority: int  # concurrency.priority: higher is served first
    demand: int  # episodes it has to run now: in flight and waiting to be admitted
    inflight: int  # its episodes in flight: what it holds of the engines now
    loaded: bool  # its controller's last reading was not clear (soft or hard): no growth
    ceiling: int | None  # what it was given last time; None before its first arbitration
    capacity: int | None = None  # the pool's capacity its ceiling was cut from last time
    queued: int = 0  # requests waiting on the pool's engines at its last poll (anyone's)
    overloaded: bool = False  # its controller's last reading was hard (preemptions, a queue)


@dataclass(frozen=True, slots=True)
class Share:
    """One run's part of the pool."""

    run_id: int
    ceiling: int
    capacity: int  # the pool's capacity it was cut from
    runs: tuple[int, ...]  # the runs in the pool, this one included
    others: int = 0  # episodes the other runs may hold now: in flight, or up to their ceilings
    others_over: int = 0  # episodes the other runs hold above their ceilings: draining


def pool_of(run_id: int, claims: Sequence[Claim]) -> list[Claim]:
    """The claims of the runs sharing an engine with ``run_id``'s (its own first)."""
    own = next(c for c in claims if c.run_id == run_id)
    others = [c for c in claims if c.run_id != run_id and c.engines & own.engines]
    return [own, *sorted(others, key=lambda c: c.run_id)]


def capacity(pool: Sequence[Claim], headroom: float = SHARE_HEADROOM) -> int:
    """What the pool can take now, as its runs measure it (see the module's docstring)."""
    carried = max(0, sum(c.inflight for c in pool) - max(c.queued for c in pool))
    # Every run of the pool re-cuts the capacity once a look, each from the others' last
    # cut: each lets it down by its part of a look's fall, so it falls as fast in any pool.
    fall = SHARE_MEMORY ** (1.0 / len(pool))
    remembered = int(max((c.capacity or 0 for c in pool), default=0) * fall)
    if any(c.overloaded for c in pool) or all(c.loaded for c in pool):
        return max(carried, remembered, len(pool))
    return max(math.ceil(carried * headroom), remembered, len(pool))


def ceilings(pool: Sequence[Claim], total: int) -> dict[int, int]:
    """``total`` split between the pool's runs: by priority, then weight, up to each one's
    demand while another wants more; what is left over is spread by weight. Each run gets
    at least 1 (a run with a ceiling of 0 could never show it has work)."""
    given = {c.run_id: 1 for c in pool}
    left = total - len(pool)
    for priority in sorted({c.priority for c in pool}, reverse=True):
        tier = [c for c in pool if c.priority == priority]
        left = _fill(tier, given, left)
    if left > 0:
        _spread(pool, given, left)
    return given


def arbitrate(
    run_id: int, claims: Sequence[Claim], headroom: float = SHARE_HEADROOM
) -> Share | None:
    """``run_id``'s share of its pool; None when it shares no engine with a run claiming."""
    pool = pool_of(run_id, claims)
    if len(pool) == 1:
        return None
    total = capacity(pool, headroom)
    given = ceilings(pool, total)
    others = [c for c in pool if c.run_id != run_id]
    return Share(
        run_id,
        given[run_id],
        total,
        tuple(c.run_id for c in pool),
        others=sum(max(c.inflight, given[c.run_id]) for c in others),
        others_over=sum(max(0, c.inflight - given[c.run_id]) for c in others),
    )


def _fill(tier: Sequence[Claim], given: dict[int, int], left: int) -> int:
    """Water-fill ``left`` over ``tier`` by weight, no run past its demand; what is left."""
    wanting = [c for c in tier if c.demand > given[c.run_id]]
    while left > 0 and wanting:
        weights = sum(c.weight for c in wanting)
        share = {c.run_id: left * c.weight / weights for c in wanting}
        done = [c for c in wanting if given[c.run_id] + share[c.run_id] >= c.demand]
        if not done:  # nobody reaches their demand: the rest goes by weight, all of it
            return _spread(wanting, given, left)
        for claim in done:
            left -= claim.demand - given[claim.run_id]
            given[claim.run_id] = claim.demand
        wanting = [c for c in wanting if c not in done]
    return left


def _spread(runs: Sequence[Claim], given: dict[int, int], left: int) -> int:
    """All of ``left`` over ``runs`` by weight, in whole episodes (largest remainders)."""
    weights = sum(c.weight for c in runs)
    exact = {c.run_id: left * c.weight / weights for c in runs}
    whole = {run: int(part) for run, part in exact.items()}
    rest = left - sum(whole.values())
    by_remainder = sorted(exact, key=lambda run: (whole[run] - exact[run], run))
    for run in by_remainder[:rest]:
        whole[run] += 1
    for run, part in whole.items():
        given[run] += part
    return 0
