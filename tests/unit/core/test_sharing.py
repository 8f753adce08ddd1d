"""Runs that share engines: the pool's level is its leader's, split by priority, weight and KV
footprint, a share a run does not use lent and given back; the controller holds its part, the
leader sizing the pool as a run alone and the others following it."""

from __future__ import annotations

import itertools

import pytest

from tests.unit.core.builders import complete, sample
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.base import PoolView
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.polls import PollSummary
from workers.core.controller.pool_part import PoolPart
from workers.core.controller.records import ControllerConfig
from workers.core.decisions import Cause, DecisionKind
from workers.core.sharing import OVERDUE_GRACE_S, Claim, arbitrate, ceilings, leader_of

POOL = frozenset({"http://e0", "http://e1"})


def claim(run: int, **fields: object) -> Claim:
    values: dict = dict(
        run_id=run, engines=POOL, weight=1.0, priority=0, demand=1000, inflight=10,
        max_inflight=1000, level=200.0, renew_s=1.0, since=float(run),
    )  # fmt: skip
    values.update(fields)
    return Claim(**values)


def test_a_run_alone_on_its_engines_has_no_part() -> None:
    other_pool = claim(2, engines=frozenset({"http://elsewhere"}))
    assert arbitrate(1, [claim(1), other_pool]) is None


def test_the_pool_is_sized_by_the_run_hosted_on_it_longest() -> None:
    first, second = claim(1, level=216.0, since=50.0), claim(2, level=4.0, since=10.0)
    assert leader_of([first, second]).run_id == 2  # hosted longest, whatever its id
    tied = [claim(3, since=5.0), claim(1, since=5.0)]
    assert leader_of(tied).run_id == 1
    share = arbitrate(1, [claim(1, level=216.0, inflight=200), claim(2, level=4.0, inflight=5)])
    assert share is not None
    assert (share.leader, share.level, share.ceiling, share.runs) == (1, 216.0, 108, (1, 2))
    assert share.most == 2000 and share.fraction == 0.5
    assert (share.others_inflight, share.others_may_hold) == (5, 16)  # run 2 may take the 11 free
    assert arbitrate(2, [claim(1, level=216.0), claim(2, level=4.0)]).ceiling == 108  # type: ignore[union-attr]


def test_weights_split_the_pool_and_the_parts_add_up_to_it() -> None:
    pool = [claim(1, weight=2.0), claim(2), claim(3)]
    assert ceilings(pool, 200) == {1: 100, 2: 50, 3: 50}
    assert sum(ceilings(pool, 201).values()) == 201


def test_a_share_is_of_the_kv_cache_not_of_episodes() -> None:
    heavy_and_light = [claim(1, footprint=3000.0), claim(2, footprint=1000.0)]
    assert ceilings(heavy_and_light, 202) == {1: 51, 2: 151}  # 1 each, then 150k KV tokens each
    unmeasured = [claim(1, footprint=3000.0), claim(2, footprint=1000.0), claim(3)]
    assert ceilings(unmeasured, 223) == {1: 41, 2: 121, 3: 61}  # run 3 at the mean, 2000
    assert ceilings([claim(1), claim(2)], 200) == {1: 100, 2: 100}  # none measured: episodes


def test_a_share_not_used_is_lent_and_comes_back_with_its_owners_demand() -> None:
    idle = [claim(1, demand=20), claim(2)]
    assert ceilings(idle, 200) == {1: 20, 2: 180}
    assert ceilings([claim(1, demand=500), claim(2)], 200) == {1: 100, 2: 100}
    nobody_wants_it = [claim(1, demand=20), claim(2, demand=30)]
    assert ceilings(nobody_wants_it, 200) == {1: 95, 2: 105}  # spread by weight, all of it


def test_a_run_filling_its_part_takes_the_room_the_runs_it_displaces_free() -> None:
    holding, joining = claim(1, inflight=200, level=200.0), claim(2, inflight=10)
    first, second = arbitrate(1, [holding, joining]), arbitrate(2, [holding, joining])
    assert first is not None and second is not None
    assert (first.ceiling, first.held_back, second.ceiling, second.held_back) == (100, 0, 100, 90)
    assert second.fraction == 0.5  # the part; what is held back comes as run 1 frees it
    freeing = arbitrate(2, [claim(1, inflight=150), claim(2, inflight=40)])
    assert freeing is not None and freeing.held_back == 50  # 10 free: its cap 50 (40 + 10)
    filled = arbitrate(2, [claim(1, inflight=110), claim(2, inflight=92)])
    assert filled is not None and filled.held_back == 0  # within 10 % of its part
    two = [claim(1, inflight=60), claim(2, inflight=20), claim(3, inflight=0)]
    split = [arbitrate(run, two) for run in (2, 3)]  # 120 free, lacking 47 and 66
    assert [s.held_back if s else None for s in split] == [0, 0]
    crowded = [claim(1, inflight=150), claim(2, inflight=20), claim(3, inflight=0)]
    shares = [arbitrate(run, crowded) for run in (2, 3)]  # 30 free, lacking 47 and 66
    assert [s.held_back if s else None for s in shares] == [35, 49]  # 12 and 17 of the 30


def test_a_priority_run_displacing_others_takes_over_what_they_free_an_equal_one_does_not() -> None:
    pool = [claim(1, inflight=150), claim(2, inflight=0, priority=1, demand=150)]
    urgent, displaced = arbitrate(2, pool), arbitrate(1, pool)
    assert urgent is not None and urgent.displacing
    assert displaced is not None and not displaced.displacing
    equal = arbitrate(2, [claim(1, inflight=150), claim(2, inflight=0)])
    assert equal is not None and not equal.displacing  # a join among equals ramps at its pace
    freed = arbitrate(2, [claim(1, inflight=1), claim(2, inflight=60, priority=1, demand=150)])
    assert freed is not None and freed.displacing  # what run 1 freed since is still its own
    filled = arbitrate(2, [claim(1, inflight=60), claim(2, inflight=140, priority=1, demand=150)])
    assert filled is not None and not filled.displacing


def test_a_higher_priority_is_served_first() -> None:
    pool = [claim(1, priority=1, demand=150), claim(2), claim(3)]
    assert ceilings(pool, 200) == {1: 150, 2: 25, 3: 25}
    greedy = [claim(1, priority=1), claim(2)]
    assert ceilings(greedy, 200) == {1: 199, 2: 1}  # never 0: a run must be able to show work


def part(
    fraction: float, *, leads: bool, level: float = 200.0, others: int = 0, **extra: object
) -> PoolPart:
    return PoolPart(
        fraction, leads, level, 2000, others_inflight=others, others_may_hold=others, **extra
    )  # type: ignore[arg-type]


def alone_at(level: int, policy: object = None) -> Controller:
    ctl = Controller(
        ControllerConfig(initial_inflight=level, max_inflight=500),
        policy or ReferencePolicy(),  # type: ignore[arg-type]
    )
    ctl.on_poll([sample("e0")], inflight=level, now=0.0)
    return ctl


def test_a_run_that_joins_a_pool_follows_its_level_and_holds_its_part() -> None:
    ctl = Controller(ControllerConfig(max_inflight=500), PacerPolicy())  # not bootstrapped yet
    (joined,) = ctl.share(part(0.5, leads=False, level=216.0), now=1.0, detail="run 1 leads")
    assert (joined.kind, joined.cause, joined.cap_after, ctl.cap, ctl.level) == (
        DecisionKind.BOOTSTRAP,  # its start, as a run alone's is its derived cap
        Cause.START,
        108,
        108,
        216.0,
    )
    reason = (
        "Increased concurrency 1 -> 108 (start): started at its part of the pool: "
        "run 1 leads: ceiling none -> 108"
    )
    assert joined.reason == reason
    assert joined.figures["ceiling"] == 108  # the run page's ceiling line
    polled = ctl.on_poll([sample("e0", kv=0.1)], inflight=108, now=5.0)
    assert [d.kind for d in polled] == []  # no bootstrap: it started at its part
    assert complete(ctl, 200, now=6.0, pool=108) == [] and ctl.cap == 108  # the leader grows
    (followed,) = ctl.share(part(0.5, leads=False, level=250.0), now=10.0, detail="level 250")
    assert (followed.cap_before, followed.cap_after) == (108, 125)
    assert ctl.share(part(0.5, leads=False, level=250.0), now=15.0, detail="same") == ()
    with pytest.raises(ValueError, match="another run's controller sizes the pool"):
        ctl.set(50, now=16.0)


def test_the_leader_sizes_the_pool_from_every_runs_episodes_and_sheds_its_part_of_a_cut() -> None:
    ctl = alone_at(200)
    (shared,) = ctl.share(part(0.5, leads=True, others=100), now=1.0, detail="run 2 joined")
    assert (shared.cap_before, shared.cap_after, ctl.level) == (200, 100, 200.0)
    (cut,) = ctl.on_poll([sample("e0", preemptions=3)], inflight=100, now=5.0)
    assert cut.kind is DecisionKind.CUT
    assert ctl.level == 160.0  # the reference's 0.8 x the pool's 200 in flight, not its own 100
    assert (cut.cap_after, cut.shed) == (80, 20)  # its part of the cut pool, its excess shed


def test_the_leader_grows_the_pool_while_the_pool_binds_though_its_own_part_is_idle() -> None:
    def grown(others: int) -> float:
        ctl = alone_at(100)
        ctl.share(part(0.2, leads=True, level=100.0, others=others), now=1.0, detail="")
        complete(ctl, 10, now=2.0, pool=10)  # its own 20 are half used
        return ctl.level

    assert grown(0) == 100.0  # the pool of 10 does not bind a level of 100
    assert grown(80) > 100.0  # with the others' 80 it does


def test_growth_not_yet_on_record_is_recorded_before_a_share_decision() -> None:
    ctl = alone_at(100)
    records = list(ctl.share(part(0.2, leads=True, others=80), now=1.0, detail=""))
    records += complete(ctl, 200, now=2.0, pool=20)  # the first step recorded, the rest wait
    records += ctl.share(part(0.5, leads=True, others=50), now=3.0, detail="")
    kinds = [d.kind for d in records]
    assert kinds == [DecisionKind.SHARE, DecisionKind.GROW, DecisionKind.GROW, DecisionKind.SHARE]
    for earlier, later in itertools.pairwise(records):
        assert later.cap_before == earlier.cap_after, records  # each starts where one ended
    assert all(d.cap_after > d.cap_before for d in records[1:3])  # growth reads as growth


def test_the_leader_counts_the_other_runs_completions_in_the_pools_turnover() -> None:
    ctl = alone_at(100, PacerPolicy())
    ctl.share(part(0.01, leads=True, level=100.0, others=99), now=1.0, detail="")
    ctl.on_poll([sample("e0", kv=0.3)], inflight=1, now=5.0)
    ctl.others_completed(50, now=6.0)  # half the pool turned over, none of it its own
    assert ctl.make_stats(6.0).turnover == pytest.approx(0.5)
    assert ctl.level > 100.0  # and the pool grew for it
    follower = alone_at(100)
    follower.share(part(0.5, leads=False, level=100.0, others=50), now=1.0, detail="")
    assert follower.others_completed(50, now=2.0) == ()
    assert (follower.make_stats(2.0).turnover, follower.level) == (0.0, 100.0)


def test_a_claim_renewed_late_leaves_the_pools_count_in_doubt() -> None:
    def counted(age: float, own_age: float = 0.0) -> bool:
        share = arbitrate(1, [claim(1, age=own_age), claim(2, renew_s=1.0, age=age)])
        assert share is not None
        return share.counted

    assert counted(1.0 + OVERDUE_GRACE_S)  # a renewal a little late: a slow write
    assert not counted(1.1 + OVERDUE_GRACE_S)  # a renewal missed: the host may be dead
    assert counted(0.5, own_age=60.0)  # its own claim is its own to judge, not the pool's


def test_the_leader_does_not_grow_the_pool_while_a_run_is_overdue() -> None:
    def grown(counted: bool) -> float:
        ctl = alone_at(100)
        ctl.share(part(0.2, leads=True, others=80, counted=counted), now=1.0, detail="")
        complete(ctl, 10, now=2.0, pool=10)
        return ctl.level

    assert grown(True) > 100.0
    assert grown(False) == 100.0  # the others' 80 may have died with their host


def test_the_controller_tells_its_policy_when_the_pools_count_is_in_doubt() -> None:
    seen: list[bool] = []

    class Recording(ReferencePolicy):
        def read(self, poll: PollSummary, pool: PoolView):  # type: ignore[no-untyped-def]
            seen.append(pool.counted)
            return super().read(poll, pool)

    ctl = alone_at(100, Recording())
    ctl.share(part(0.5, leads=True, others=50, counted=False), now=1.0, detail="")
    ctl.on_poll([sample("e0")], inflight=50, now=5.0)
    ctl.share(part(0.5, leads=True, others=50), now=6.0, detail="")
    ctl.on_poll([sample("e0")], inflight=50, now=10.0)
    assert seen == [True, False, True]  # alone, a run overdue, renewed


def test_an_epoch_with_a_run_overdue_is_no_verdict_on_the_pool() -> None:
    """A dead host's episodes are aborted while its claim still states them: the same tokens
    from a pool that seems a third larger would read as flat."""

    def causes(counted: bool) -> list[Cause]:
        policy, readings = PacerPolicy(), []
        for index, inflight in enumerate([100] * 4 + [130] * 12):
            doubt = not counted and inflight > 100  # the host died as the pool grew
            view = PoolView(float(inflight), inflight, None, index / 4, counted=not doubt)
            poll = PollSummary.from_samples([sample(running=inflight, tokens=1000)], index * 5.0)
            readings.append(policy.read(poll, view).cause)
        return readings

    assert Cause.THROUGHPUT_FLAT in causes(counted=True)
    assert Cause.THROUGHPUT_FLAT not in causes(counted=False)


def test_a_part_moved_by_less_than_5_percent_is_not_taken_while_the_pool_is_the_same() -> None:
    terms = ((1, 1.0, 0), (2, 1.0, 0))
    ctl = alone_at(200)
    ctl.share(part(0.5, leads=True, terms=terms), now=1.0, detail="")
    assert ctl.share(part(0.52, leads=True, terms=terms), now=2.0, detail="") == ()
    assert ctl.cap == 100
    (moved,) = ctl.share(part(0.6, leads=True, terms=terms), now=3.0, detail="")
    assert moved.cap_after == 120
    new_terms = ((1, 1.0, 0), (2, 1.1, 0))  # an operator's share: taken whatever its size
    (taken,) = ctl.share(part(0.58, leads=True, terms=new_terms), now=4.0, detail="")
    assert taken.cap_after == 116
    (held,) = ctl.share(part(0.58, leads=True, terms=new_terms, held_back=3), now=5.0, detail="")
    assert held.cap_after == 113  # what it is held back is taken as it is


def test_a_run_left_alone_holds_the_whole_level_at_once() -> None:
    ctl = alone_at(200)
    ctl.share(part(0.5, leads=True), now=1.0, detail="")
    (alone,) = ctl.share(None, now=2.0, detail="no other run shares its engines")
    assert (alone.cap_before, alone.cap_after, ctl.ceiling) == (100, 200, None)
    assert alone.reason.endswith("no other run shares its engines: ceiling 100 -> none")
    assert "ceiling" not in alone.figures


def test_a_follower_whose_part_falls_while_the_engines_preempt_sheds_its_excess() -> None:
    ctl = Controller(ControllerConfig(max_inflight=500), ReferencePolicy())
    ctl.share(part(0.5, leads=False, level=200.0), now=0.0, detail="")
    ctl.on_poll([sample("e0")], inflight=100, now=1.0)
    (calm,) = ctl.share(part(0.5, leads=False, level=180.0), now=2.0, detail="trimmed")
    assert (calm.cap_after, calm.shed) == (90, 0)  # no overload: its excess completes
    ctl.on_poll([sample("e0", preemptions=2)], inflight=100, now=5.0)
    (hard,) = ctl.share(part(0.5, leads=False, level=160.0), now=6.0, detail="cut")
    assert (hard.cap_after, hard.shed) == (80, 20)


def test_requests_other_runs_on_the_engines_hold_are_no_reconcile_alert() -> None:
    def alerts(neighbours: int) -> list:
        ctl = Controller(ControllerConfig(initial_inflight=10, over_permit_polls=3), PacerPolicy())
        if neighbours:
            ctl.share(part(0.2, leads=True, level=50.0, others=neighbours), now=0.0, detail="")
        decisions = []
        for index in range(4):
            decisions += ctl.on_poll([sample("e0", running=50)], inflight=10, now=5.0 * index)
        return [d for d in decisions if d.kind is DecisionKind.RECONCILE]

    assert len(alerts(0)) == 1  # 50 requests against 10 permits: nobody's
    assert alerts(40) == []  # another run's 40 episodes own them


def test_a_pool_part_refuses_what_is_not_a_part() -> None:
    with pytest.raises(ValueError, match="fraction must be in"):
        part(0.0, leads=True)
    with pytest.raises(ValueError, match="fraction must be in"):
        part(1.5, leads=True)
