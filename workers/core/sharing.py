"""Runs that share engines: one pool, sized by one controller, split by shares and priorities.

Each run's controller reads the engines' KV and queues, which hold every run's requests. Two
controllers each sizing their own run on one pool read each other's load as their own: whoever
fills the pool first keeps it, and a throughput probe even credits a run with the tokens it
takes from the other. So a pool of shared engines is sized as one: the controller of the run
hosted on it longest (the pool's *leader*) sizes the pool's in-flight level, reading the pool's
episodes and tokens as it would read a run alone, and every run holds its part of that level.
The others follow the leader's level; when its host dies, its claim goes stale and the run
hosted longest after it leads on from the level the pool was at.

The parts go by priority, highest first, and within a priority by weight (``share``), each
run getting no more than it has to run now (its demand) while another wants more: a share a
run does not use is lent, and comes back as soon as its demand does. A run that has not
filled its part yet (one that just joined, or one of higher priority) takes it as the runs it
displaces free it: it is held back to the pool's free room, and the others, held to their
parts, admit nothing while they finish what they hold beyond them. So the pool holds no more
than its level through the change, where taking a part at once on a full pool is a
preemption storm. What no run wants is spread by weight, so the parts always add up to the
level. Each run gets at least one episode (a run with nothing in flight could never show it
has work). A share is of the engines' KV cache, not of episodes: each run states the KV one
of its episodes holds on average (its footprint), and a run whose episodes hold twice as
much gets half as many at the same weight.

Every host states its run's claim and computes every part from the same claims with this rule,
so no single process arbitrates. Pure: claims in, parts out. A run alone on its engines has no
part: it is the whole pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A run's share (a weight) and priority, as a config or an operator gives them: a million to
# one between shares is more than any split a person means; priorities are ranks, not sizes.
SHARE_RANGE = (1e-3, 1e3)
PRIORITY_RANGE = (-100, 100)
# A run that holds less than 90 % of its part is still filling it, and takes no more than the
# pool's free room. A run that holds its part gives or takes a group of episodes from look to
# look, and that is no reason to hold it back.
FILLING = 0.9
# A claim its host has not renewed for a lease's life (workers.runtime.lease.LEASE_TTL_S) is a
# host that is gone: its run is someone else's to host by then, and the pool is split without it.
CLAIM_TTL_S = 20.0
# A host looks at the pool (and so renews its claim) every poll period, but at least four times
# in a claim's life: a run polling its engines every minute would otherwise drop out of its
# pool between two looks.
LOOK_MAX_S = CLAIM_TTL_S / 4
# A claim its host renews late by more than this is overdue: the episodes it states may have
# died with the host (their engines abort them), and the pool's in-flight count is in doubt
# until the claim is renewed or goes stale (``CLAIM_TTL_S``). Two seconds is longer than a
# database write takes (a lease renewal's is a few milliseconds) and a tenth of the TTL; a
# renewal that waits behind a long flush of the host's records (after an outage) may be later,
# which only holds the leader's growth until it comes.
OVERDUE_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class Claim:
    """What one run's host states for the pool at one look."""

    run_id: int
    engines: frozenset[str]  # the engines' base URLs: the same engine under any name
    weight: float  # concurrency.share, > 0
    priority: int  # concurrency.priority: higher is served first
    demand: int  # episodes it has to run now: its max_inflight while it would take more
    inflight: int  # its episodes in flight: what it holds of the engines now
    max_inflight: int  # the most it may ever hold: the pool's level is bounded by their sum
    level: float  # the pool's level as its controller holds it (the leader's is the pool's)
    renew_s: float  # how often its host renews it (the host's look period)
    since: float = 0.0  # when the exchange first saw the run's current host: the longest leads
    ceiling: int | None = None  # its part at its last look; None while it was alone
    footprint: float | None = None  # KV tokens one of its episodes holds on average; None:
    # not measured yet (no episode finished), taken as the pool's mean
    completed: int = 0  # episodes it completed under its current host: the leader counts them
    age: float = 0.0  # seconds since its host last renewed it, as the exchange read it

    @property
    def overdue(self) -> bool:
        """Its host missed a renewal (``OVERDUE_GRACE_S``): it may be dead."""
        return self.age > self.renew_s + OVERDUE_GRACE_S


@dataclass(frozen=True, slots=True)
class Share:
    """One run's part of the pool."""

    run_id: int
    ceiling: int  # its part of the level, in episodes
    level: float  # the pool's level: the leader's
    leader: int  # the run whose controller sizes the pool
    runs: tuple[int, ...]  # the runs in the pool, this one first
    most: int  # the highest level the pool may have: its runs' max_inflight, summed
    held_back: int = 0  # of its part, what the runs it displaces have not freed yet
    displacing: bool = False  # it fills its part beside runs of lower priority: the slots
    # they free are its to take over at once
    others_inflight: int = 0  # episodes the other runs hold in flight
    others_may_hold: int = 0  # ...or may hold by their parts, if more: their claims lag
    counted: bool = True  # every other run's claim was renewed on time: the episodes they
    # state are in flight (an overdue host's may have died with it)

    @property
    def fraction(self) -> float:
        """Its part of the level, which the leader moves between looks."""
        return self.ceiling / max(1, int(self.level))


def pool_of(run_id: int, claims: Sequence[Claim]) -> list[Claim]:
    """The claims of the runs sharing an engine with ``run_id``'s (its own first)."""
    own = next(c for c in claims if c.run_id == run_id)
    others = [c for c in claims if c.run_id != run_id and c.engines & own.engines]
    return [own, *sorted(others, key=lambda c: c.run_id)]


def leader_of(pool: Sequence[Claim]) -> Claim:
    """The run hosted on the pool longest (the lowest id among equals)."""
    return min(pool, key=lambda c: (c.since, c.run_id))


def ceilings(pool: Sequence[Claim], total: int) -> dict[int, int]:
    """``total`` split between the pool's runs: by priority, then weight, up to each one's
    demand while another wants more; what is left over is spread by weight. Each run gets
    at least 1 (a run with a ceiling of 0 could never show it has work)."""
    given = {c.run_id: 1 for c in pool}
    weights = _kv_weights(pool)
    left = total - len(pool)
    for priority in sorted({c.priority for c in pool}, reverse=True):
        tier = [c for c in pool if c.priority == priority]
        left = _fill(tier, weights, given, left)
    if left > 0:
        _spread(pool, weights, given, left)
    return given


def arbitrate(run_id: int, claims: Sequence[Claim]) -> Share | None:
    """``run_id``'s part of its pool; None when it shares no engine with a run claiming."""
    pool = pool_of(run_id, claims)
    if len(pool) == 1:
        return None
    leader = leader_of(pool)
    parts = ceilings(pool, int(leader.level))
    held_back = _held_back(pool, parts)
    others = pool[1:]
    return Share(
        run_id,
        parts[run_id],
        leader.level,
        leader.run_id,
        tuple(c.run_id for c in pool),
        most=sum(c.max_inflight for c in pool),
        held_back=held_back[run_id],
        displacing=_displacing(pool, parts),
        others_inflight=sum(c.inflight for c in others),
        others_may_hold=sum(max(c.inflight, parts[c.run_id] - held_back[c.run_id]) for c in others),
        counted=not any(c.overdue for c in others),
    )


def _held_back(pool: Sequence[Claim], parts: dict[int, int]) -> dict[int, int]:
    """What each run still filling its part (more than ``FILLING`` short of it) may not take
    yet: the pool's free room (its level less every run's episodes in flight) is split between
    them by what they lack, and the rest of their parts waits for the runs holding more than
    theirs to finish it. Taken at once, a priority run's part overloads the engines for as long
    as the others' episodes run (a preemption storm on a full pool)."""
    short = {c.run_id: parts[c.run_id] - c.inflight for c in pool}
    filling = [c.run_id for c in pool if _filling(c, parts)]
    room = max(0, sum(parts.values()) - sum(c.inflight for c in pool))
    lacking = sum(short[run] for run in filling)
    held = dict.fromkeys(parts, 0)
    for run in filling:
        held[run] = max(0, short[run] - int(room * short[run] / lacking))
    return held


def _displacing(pool: Sequence[Claim], parts: dict[int, int]) -> bool:
    """The run (first in ``pool``) is filling its part beside runs of lower priority: a
    higher priority is served first, so the slots their episodes free are taken over as they
    free, not at the admission pace of a run that ramps (a join among equals keeps that pace,
    which changes the pool the leader measures more gently)."""
    own = pool[0]
    return _filling(own, parts) and any(c.priority < own.priority for c in pool[1:])


def _filling(claim: Claim, parts: dict[int, int]) -> bool:
    """The run holds less than ``FILLING`` of its part: it is still taking it."""
    return claim.inflight < FILLING * parts[claim.run_id]


def _kv_weights(pool: Sequence[Claim]) -> dict[int, float]:
    """Each run's weight per episode: its share over its footprint, so that equal shares hold
    equal KV. A run not measured yet is taken at the measured runs' mean (at 1 when none is)."""
    known = [c.footprint for c in pool if c.footprint]
    mean = sum(known) / len(known) if known else 1.0
    return {c.run_id: c.weight / (c.footprint or mean) for c in pool}


def _fill(
    tier: Sequence[Claim], weights: dict[int, float], given: dict[int, int], left: int
) -> int:
    """Water-fill ``left`` over ``tier`` by weight, no run past its demand; what is left."""
    wanting = [c for c in tier if c.demand > given[c.run_id]]
    while left > 0 and wanting:
        total = sum(weights[c.run_id] for c in wanting)
        share = {c.run_id: left * weights[c.run_id] / total for c in wanting}
        done = [c for c in wanting if given[c.run_id] + share[c.run_id] >= c.demand]
        if not done:  # nobody reaches their demand: the rest goes by weight, all of it
            return _spread(wanting, weights, given, left)
        for claim in done:
            left -= claim.demand - given[claim.run_id]
            given[claim.run_id] = claim.demand
        wanting = [c for c in wanting if c not in done]
    return left


def _spread(
    runs: Sequence[Claim], weights: dict[int, float], given: dict[int, int], left: int
) -> int:
    """All of ``left`` over ``runs`` by weight, in whole episodes (largest remainders)."""
    total = sum(weights[c.run_id] for c in runs)
    exact = {c.run_id: left * weights[c.run_id] / total for c in runs}
    whole = {run: int(part) for run, part in exact.items()}
    rest = left - sum(whole.values())
    by_remainder = sorted(exact, key=lambda run: (whole[run] - exact[run], run))
    for run in by_remainder[:rest]:
        whole[run] += 1
    for run, part in whole.items():
        given[run] += part
    return 0
