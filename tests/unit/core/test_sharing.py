"""The pool arbiter's rule: the capacity its runs measure, split by priority and weight, a
share a run does not use lent and given back, and the ceiling a controller keeps to."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import complete, sample
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.records import ControllerConfig
from workers.core.decisions import Cause, DecisionKind
from workers.core.sharing import Claim, arbitrate, capacity, ceilings

POOL = frozenset({"http://e0", "http://e1"})


def claim(run: int, **fields: object) -> Claim:
    values: dict = dict(
        run_id=run, engines=POOL, weight=1.0, priority=0, demand=1000, inflight=10, loaded=False,
        ceiling=None,
    )  # fmt: skip
    values.update(fields)
    return Claim(**values)


def test_a_run_alone_on_its_engines_has_no_ceiling() -> None:
    other_pool = claim(2, engines=frozenset({"http://elsewhere"}))
    assert arbitrate(1, [claim(1), other_pool]) is None


def test_the_first_run_to_fill_the_pool_gives_half_of_it_to_the_second() -> None:
    first, second = claim(1, inflight=216, loaded=True), claim(2, inflight=5, loaded=True)
    share = arbitrate(1, [first, second])
    assert share is not None
    assert (share.capacity, share.ceiling, share.runs) == (221, 111, (1, 2))
    assert arbitrate(2, [first, second]).ceiling == 110  # type: ignore[union-attr]


def test_weights_split_the_pool_and_the_ceilings_add_up_to_it() -> None:
    pool = [claim(1, weight=2.0), claim(2), claim(3)]
    given = ceilings(pool, 200)
    assert given == {1: 100, 2: 50, 3: 50}
    assert sum(ceilings(pool, 201).values()) == 201


def test_a_share_not_used_is_lent_and_comes_back_with_its_owners_demand() -> None:
    idle = [claim(1, demand=20), claim(2)]
    assert ceilings(idle, 200) == {1: 20, 2: 180}
    assert ceilings([claim(1, demand=500), claim(2)], 200) == {1: 100, 2: 100}
    nobody_wants_it = [claim(1, demand=20), claim(2, demand=30)]
    assert ceilings(nobody_wants_it, 200) == {1: 95, 2: 105}  # spread by weight, all of it


def test_a_higher_priority_is_served_first() -> None:
    pool = [claim(1, priority=1, demand=150), claim(2), claim(3)]
    assert ceilings(pool, 200) == {1: 150, 2: 25, 3: 25}
    greedy = [claim(1, priority=1), claim(2)]
    assert ceilings(greedy, 200) == {1: 199, 2: 1}  # never 0: a run must be able to show work


def test_the_capacity_is_what_the_runs_carry_while_none_would_grow_or_one_is_overloaded() -> None:
    holding = [claim(1, inflight=100, loaded=True), claim(2, inflight=50, loaded=True)]
    assert capacity(holding) == 150
    one_preempting = [claim(1, inflight=100, overloaded=True, loaded=True), claim(2, inflight=50)]
    assert capacity(one_preempting) == 150  # the other would grow, but the pool is past its room
    queued = [claim(1, inflight=100, loaded=True, queued=20), claim(2, inflight=50, loaded=True)]
    assert capacity(queued) == 130  # requests the engines queue are held, not carried


def test_the_pool_has_headroom_while_a_run_would_grow_and_none_is_overloaded() -> None:
    one_growing = [claim(1, inflight=100, loaded=True), claim(2, inflight=50)]
    assert capacity(one_growing) == 188  # 150 x 1.25, rounded up
    assert capacity([claim(1, inflight=1), claim(2, inflight=1)]) == 3  # a new pool grows


def test_the_capacity_is_remembered_and_let_down_slowly() -> None:
    trimmed = [
        claim(1, inflight=60, loaded=True, capacity=220),
        claim(2, inflight=110, loaded=True, capacity=200),
    ]
    assert capacity(trimmed) == 217  # a trim does not drag the other's ceiling down...
    # ...and each of the two runs' cuts lets it down by half a look's 2 %: 220 x .98 ** .5
    stepped_back = [claim(1, inflight=20, capacity=220), claim(2, inflight=30, capacity=220)]
    assert capacity(stepped_back) == 217  # room, and what it held is let down the same
    three = [claim(run, inflight=10, loaded=True, capacity=300) for run in (1, 2, 3)]
    assert capacity(three) == 297  # 300 x .98 ** (1/3): a look's fall over its three cuts


def test_a_share_tells_what_the_other_runs_may_hold_and_what_they_must_drain() -> None:
    big = claim(1, inflight=150, loaded=True, ceiling=150)
    joining = claim(2, priority=1, inflight=24, demand=200, loaded=True)
    share = arbitrate(2, [big, joining])
    assert share is not None and share.ceiling == 173 and share.capacity == 174
    assert (share.others, share.others_over) == (150, 149)  # run 1 is cut to 1 and drains
    small = claim(3, inflight=5)
    quiet = arbitrate(1, [claim(1, inflight=50), small])
    assert quiet is not None and quiet.others == 34 and quiet.others_over == 0  # its ceiling


def test_a_ceiling_below_the_level_brings_the_cap_down_at_once_and_says_why() -> None:
    ctl = Controller(ControllerConfig(initial_inflight=200), PacerPolicy())
    ctl.on_poll([sample("e0")], inflight=0, now=0.0)
    (share,) = ctl.set_ceiling(110, now=1.0, detail="run 1 shares e0 with run 2: ceiling 110")
    assert (share.kind, share.cause, share.cap_before, share.cap_after, ctl.cap) == (
        DecisionKind.SHARE,
        Cause.SHARE,
        200,
        110,
        110,
    )
    assert share.reason == (
        "Decreased concurrency 200 -> 110 (share): run 1 shares e0 with run 2: ceiling 110"
    )
    assert ctl.set_ceiling(105, now=2.0, detail="small") == ()  # under 10 %: not taken
    assert ctl.cap == 110
    (lower,) = ctl.set_ceiling(90, now=2.5, detail="run 3 joined")
    assert (lower.cap_before, lower.cap_after) == (110, 90)
    assert (share.figures["ceiling"], lower.figures["ceiling"]) == (110, 90)  # for the chart
    (lifted,) = ctl.set_ceiling(None, now=3.0, detail="alone again")
    assert (lifted.cap_before, lifted.cap_after) == (90, 90)  # the policy grows back itself
    assert "ceiling" not in lifted.figures
    with pytest.raises(ValueError, match="ceiling must be"):
        ctl.set_ceiling(0, now=4.0, detail="")


def test_requests_other_runs_on_the_engines_hold_are_no_reconcile_alert() -> None:
    def alerts(neighbours: int) -> list:
        ctl = Controller(ControllerConfig(initial_inflight=10, over_permit_polls=3), PacerPolicy())
        ctl.set_neighbours(neighbours)
        decisions = []
        for index in range(4):
            decisions += ctl.on_poll([sample("e0", running=50)], inflight=10, now=5.0 * index)
        return [d for d in decisions if d.kind is DecisionKind.RECONCILE]

    assert len(alerts(0)) == 1  # 50 requests against 10 permits: nobody's
    assert alerts(40) == []  # another run's 40 episodes own them


def shared(ceiling: int, neighbours: int, over: int = 0) -> Controller:
    ctl = Controller(ControllerConfig(initial_inflight=20, max_inflight=500), PacerPolicy())
    ctl.on_poll([sample("e0")], inflight=20, now=0.0)
    ctl.set_ceiling(ceiling, now=0.5, detail="shared")
    ctl.set_neighbours(neighbours, over=over)
    return ctl


def test_an_overload_while_the_other_runs_drain_to_their_ceilings_cuts_nothing_within_its_own() -> (
    None
):
    draining = shared(120, 150, over=149)
    assert draining.on_poll([sample("e0", preemptions=3)], inflight=20, now=5.0) == ()
    assert draining.cap == 20  # a run that joined a loaded pool is not cut to nothing
    drained = shared(120, 1, over=0)
    (cut,) = drained.on_poll([sample("e0", preemptions=3)], inflight=20, now=5.0)
    assert (cut.kind, cut.cap_after) == (DecisionKind.CUT, 17)  # once drained, its own overload


def test_under_a_ceiling_a_run_grows_by_the_rate_of_the_pool_s_episodes() -> None:
    def grown(neighbours: int) -> int:
        ctl = shared(200, neighbours)
        complete(ctl, 20, now=1.0, pool=20)
        return ctl.cap

    assert grown(0) < grown(80) <= 200  # its ceiling bounds it


def test_a_run_leaving_the_pool_makes_the_others_forget_the_knee_learnt_under_its_load() -> None:
    policy = PacerPolicy()
    ctl = Controller(ControllerConfig(initial_inflight=20), policy)
    ctl.on_poll([sample("e0")], inflight=20, now=0.0)
    ctl.on_poll([sample("e0", preemptions=3)], inflight=3, now=5.0)  # cut at 3: another's load
    assert ctl.make_stats(5.0).cap == 2 and policy._knee == 3.0
    ctl.neighbour_left()
    assert (policy._knee, policy._frontier) == (None, None)
