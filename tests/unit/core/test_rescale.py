"""Engines lost and back: an engine down for engine_lost_s leaves the pool's KV capacity and
the cap is rescaled to what is left; back up, the cap is rescaled back. Short outages, stale
engines and engines whose reported capacity moves while up rescale nothing."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.capacity import PoolCapacity
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.records import ControllerConfig
from workers.core.decisions import Cause, DecisionKind
from workers.core.samples import EngineHealth

UP, DOWN, STALE = EngineHealth.UP, EngineHealth.DOWN, EngineHealth.STALE
POLL_S = 5.0


def pool(e2: EngineHealth = UP, capacity: int = 131_072) -> list:
    return [
        sample("e0", capacity=capacity),
        sample("e1", capacity=capacity),
        sample("e2", capacity=capacity, health=e2),
    ]


def polls(ctl: Controller, health: EngineHealth, start: float, count: int) -> list:
    decisions = []
    for index in range(count):
        now = start + index * POLL_S
        decisions += ctl.on_poll(pool(health), inflight=ctl.cap, now=now)
    return [d for d in decisions if d.kind is DecisionKind.RESCALE]


def started(policy=None, **config) -> Controller:
    ctl = Controller(ControllerConfig(initial_inflight=150, **config), policy or PacerPolicy())
    ctl.on_poll(pool(), inflight=0, now=0.0)
    return ctl


def test_an_engine_down_past_the_lost_time_takes_its_share_of_the_cap_and_gives_it_back() -> None:
    ctl = started(engine_lost_s=60.0)
    assert polls(ctl, DOWN, 5.0, 12) == []  # 55 s down: a restart, not a loss
    (lost,) = polls(ctl, DOWN, 65.0, 1)
    assert (lost.cap_before, lost.cap_after, ctl.cap) == (150, 100, 100)
    assert lost.cause is Cause.ENGINE_LOST
    assert lost.reason == (
        "Decreased concurrency 150 -> 100 (engine lost): e2 lost (down 60 s): "
        "KV 393k -> 262k tokens"
    )
    assert polls(ctl, DOWN, 70.0, 5) == []  # lost once, not every poll
    (back,) = polls(ctl, UP, 100.0, 1)
    assert (back.cap_before, back.cap_after, back.cause) == (100, 150, Cause.ENGINE_BACK)
    assert back.reason.endswith("e2 back: KV 262k -> 393k tokens")


def test_a_return_gives_back_no_more_than_the_whole_pool_held() -> None:
    ctl = started(engine_lost_s=10.0)
    polls(ctl, DOWN, 5.0, 3)  # lost at 15 s: 150 -> 100
    ctl.set(140, now=20.0)  # the two engines left were found to take 140
    (back,) = polls(ctl, UP, 25.0, 1)
    assert (back.cap_before, back.cap_after) == (140, 150)  # not 140 x 1.5 = 210


def test_a_stale_engine_is_not_down_and_a_blip_is_forgotten() -> None:
    ctl = started(engine_lost_s=20.0)
    assert polls(ctl, STALE, 5.0, 10) == []
    assert polls(ctl, DOWN, 55.0, 3) == []  # 10 s down, then up: the clock starts again
    assert polls(ctl, UP, 70.0, 1) == []
    assert polls(ctl, DOWN, 75.0, 4) == []
    assert ctl.cap == 150


def test_capacity_reported_otherwise_while_up_is_no_rescale() -> None:
    ctl = started(engine_lost_s=60.0)
    for index in range(5):
        decisions = ctl.on_poll(pool(capacity=90_000 + index), inflight=150, now=5.0 * (index + 1))
        assert DecisionKind.RESCALE not in [d.kind for d in decisions]


def test_zero_never_counts_an_engine_out_and_a_fixed_cap_stays_fixed() -> None:
    assert polls(started(engine_lost_s=0.0), DOWN, 5.0, 100) == []
    fixed = started(FixedPolicy(), engine_lost_s=60.0, min_inflight=150, max_inflight=150)
    for decision in polls(fixed, DOWN, 5.0, 20):
        assert decision.cap_after == 150
    assert fixed.cap == 150


def test_the_policy_forgets_the_old_pool_s_knee_and_scales_its_frontier_with_the_pool() -> None:
    policy = PacerPolicy()
    ctl = started(policy, engine_lost_s=10.0)
    policy._knee.set(140.0, 0.0)
    policy._frontier.raise_to(120.0, 0.0)
    polls(ctl, DOWN, 5.0, 4)
    assert (policy._knee.level, policy._probe.anchor) == (None, None)
    assert policy._frontier.level == pytest.approx(80.0)  # two engines of three left
    policy._knee.set(70.0, 20.0)
    polls(ctl, UP, 25.0, 2)
    assert policy._knee.level is None
    assert policy._frontier.level == pytest.approx(120.0)


def test_every_engine_lost_is_the_run_s_end_not_a_rescale_to_zero() -> None:
    capacity = PoolCapacity(lost_s=10.0)
    assert capacity.observe([sample("e0")], 0.0, 10.0) is None
    for now in (5.0, 10.0, 15.0, 20.0):
        assert capacity.observe([sample("e0", health=DOWN)], now, 10.0) is None


def test_an_engine_on_two_ranks_counts_each_rank() -> None:
    capacity = PoolCapacity(lost_s=10.0)
    up = [sample("a/0", capacity=100), sample("a/1", capacity=100), sample("b/0", capacity=200)]
    capacity.observe(up, 0.0, 10.0)
    down = [sample("a/0", health=DOWN, capacity=100), *up[1:]]
    capacity.observe(down, 5.0, 10.0)
    change = capacity.observe(down, 15.0, 8.0)
    assert change is not None and (change.before, change.after, change.lost) == (400, 300, ("a/0",))
    assert change.factor == pytest.approx(0.75)
    assert change.level_then == 10.0  # the level when a/0 went down, not at its loss


def test_a_cap_the_policy_cut_already_for_the_lost_engine_is_not_cut_for_it_again() -> None:
    ctl = started(engine_lost_s=60.0)
    polls(ctl, DOWN, 5.0, 2)  # e2 went down at cap 150
    ctl.set(120, now=12.0)  # the policy (here an operator) took 30 off meanwhile
    (lost,) = polls(ctl, DOWN, 65.0, 1)
    assert (lost.cap_before, lost.cap_after) == (120, 100)  # 150 x 2/3, not 120 x 2/3
    assert polls(ctl, DOWN, 75.0, 3) == []  # no second rescale while it stays down


def test_a_latency_policy_is_not_rescaled() -> None:
    from workers.core.controller.policies.gradient2 import Gradient2Policy

    ctl = started(Gradient2Policy(), engine_lost_s=10.0)
    assert polls(ctl, DOWN, 5.0, 5) == []


def joined_pool(extra: list) -> list:
    return [sample("e0", capacity=131_072), sample("e1", capacity=131_072), *extra]


def rescales(decisions: tuple) -> list:
    return [d for d in decisions if d.kind is DecisionKind.RESCALE]


def test_an_engine_that_joins_scales_the_cap_up_once_it_reports_its_kv() -> None:
    ctl = Controller(ControllerConfig(initial_inflight=150), PacerPolicy())
    ctl.on_poll(joined_pool([]), inflight=0, now=0.0)
    ctl.set_pool(["e0", "e1", "e2"])
    silent = [sample("e2", capacity=None, health=DOWN)]
    assert rescales(ctl.on_poll(joined_pool(silent), inflight=150, now=5.0)) == []
    reported = joined_pool([sample("e2", capacity=65_536)])
    (joined,) = rescales(ctl.on_poll(reported, inflight=150, now=10.0))
    assert (joined.cap_before, joined.cap_after, joined.cause) == (150, 187, Cause.ENGINE_JOINED)
    assert joined.reason.endswith("e2 joined: KV 262k -> 328k tokens")
    assert rescales(ctl.on_poll(reported, inflight=150, now=15.0)) == []


def test_an_engine_that_leaves_takes_its_share_and_joins_afresh_when_added_again() -> None:
    ctl = started()
    ctl.set_pool(["e0", "e1"])
    (left,) = rescales(ctl.on_poll(joined_pool([]), inflight=150, now=5.0))
    assert (left.cap_before, left.cap_after, left.cause) == (150, 100, Cause.ENGINE_LEFT)
    assert left.reason.endswith("e2 left: KV 393k -> 262k tokens")
    ctl.set_pool(["e0", "e1", "e2"])
    (joined,) = rescales(ctl.on_poll(pool(), inflight=100, now=10.0))
    assert (joined.cap_before, joined.cap_after, joined.cause) == (100, 150, Cause.ENGINE_JOINED)


def test_the_pool_the_polls_show_is_no_declaration() -> None:
    """Engines missing from a poll (a test's or a monitor's) have not left: only a declared
    pool changes who counts."""
    ctl = started()
    assert rescales(ctl.on_poll(joined_pool([]), inflight=150, now=5.0)) == []
    assert ctl.cap == 150


def test_an_engine_lost_then_taken_out_of_the_run_is_not_counted_back() -> None:
    ctl = started(engine_lost_s=10.0)
    polls(ctl, DOWN, 5.0, 3)  # e2 lost: 150 -> 100
    assert ctl.cap == 100
    ctl.set_pool(["e0", "e1"])
    assert rescales(ctl.on_poll(joined_pool([]), inflight=100, now=25.0)) == []
    assert ctl.cap == 100
