"""The controller's start, growth, stale-metrics and reconciliation rules (REFERENCE section 1;
F2, F5-F10), each driven by a few polls and completions against the reference policy."""

from __future__ import annotations

import math

import pytest

from tests.unit.core.builders import complete, controller, sample, turnover
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig, EpisodeCompletion
from workers.core.decisions import Cause, DecisionKind, Signal
from workers.core.samples import EngineHealth, EngineRole

PREEMPT = [sample(preemptions=3)]
CLEAR = [sample()]


def kinds(decisions) -> list[DecisionKind]:
    return [d.kind for d in decisions]


# -- start ----------------------------------------------------------------------------------


def test_start_initial_inflight_is_the_cap_from_the_outset() -> None:
    ctl = Controller(ControllerConfig(initial_inflight=64), ReferencePolicy())
    assert ctl.cap == 64
    (boot,) = ctl.on_poll(CLEAR, inflight=0, now=0.0)
    assert boot.kind is DecisionKind.BOOTSTRAP
    assert boot.cap_after == 64
    assert "initial_inflight 64" in boot.reason


def test_start_derived_from_decode_kv_capacity_over_max_model_len() -> None:
    ctl = Controller(ControllerConfig(), ReferencePolicy())
    samples = [
        sample("d0", role=EngineRole.DECODE, capacity=300_000, max_model_len=4_000),
        sample("d1", role=EngineRole.DECODE, capacity=100_000, max_model_len=4_000),
        sample("p0", role=EngineRole.PREFILL, capacity=900_000, max_model_len=4_000),
    ]
    (boot,) = ctl.on_poll(samples, inflight=0, now=0.0)
    assert boot.kind is DecisionKind.BOOTSTRAP
    assert ctl.cap == 400_000 // 4_000


def test_start_derived_cap_uses_the_per_episode_token_budget_when_smaller() -> None:
    ctl = Controller(ControllerConfig(episode_token_budget=1_000), ReferencePolicy())
    ctl.on_poll([sample(capacity=200_000, max_model_len=8_000)], inflight=0, now=0.0)
    assert ctl.cap == 200


def test_start_waits_at_min_inflight_for_a_poll_that_reports_capacity() -> None:
    ctl = Controller(ControllerConfig(min_inflight=2), ReferencePolicy())
    assert ctl.on_poll([sample(capacity=None)], inflight=0, now=0.0) == ()
    assert ctl.cap == 2
    (boot,) = ctl.on_poll([sample(capacity=50_000)], inflight=0, now=5.0)
    assert (boot.kind, ctl.cap) == (DecisionKind.BOOTSTRAP, 50)


def test_f5_start_cap_is_derived_once_not_every_poll() -> None:
    ctl = Controller(ControllerConfig(), ReferencePolicy())
    seen = []
    for t, capacity in enumerate([33_000, 407_000, 480_000, 317_000, 639_000]):
        decisions = ctl.on_poll([sample(capacity=capacity)], inflight=0, now=5.0 * t)
        seen += [d for d in decisions if d.kind is DecisionKind.BOOTSTRAP]
        assert ctl.cap == 33
    assert len(seen) == 1


def test_start_waits_until_every_decode_engine_is_up_and_reports() -> None:
    ctl = Controller(ControllerConfig(), ReferencePolicy())
    d0 = sample("d0", role=EngineRole.DECODE, capacity=100_000)
    late = sample("d1", role=EngineRole.DECODE, health=EngineHealth.DOWN, capacity=None)
    assert ctl.on_poll([d0, late], inflight=0, now=0.0) == ()
    assert ctl.cap == 1
    d1 = sample("d1", role=EngineRole.DECODE, capacity=100_000)
    (boot,) = ctl.on_poll([d0, d1], inflight=0, now=5.0)
    assert (boot.kind, ctl.cap) == (DecisionKind.BOOTSTRAP, 200)


def test_start_is_derived_from_the_engines_that_reported_once_the_wait_is_over() -> None:
    ctl = Controller(ControllerConfig(start_wait=30.0), ReferencePolicy())
    polled = [
        sample("a", capacity=100_000),
        sample("b", health=EngineHealth.STALE, capacity=100_000),
        sample("c", health=EngineHealth.DOWN, capacity=None, max_model_len=None),
    ]
    for t in range(0, 30, 5):
        assert DecisionKind.BOOTSTRAP not in kinds(ctl.on_poll(polled, inflight=0, now=float(t)))
    (boot,) = [
        d for d in ctl.on_poll(polled, inflight=0, now=30.0) if d.kind is DecisionKind.BOOTSTRAP
    ]
    assert ctl.cap == 200  # the stale engine's capacity counts; the down one has none
    assert "b, c" in boot.reason


def test_start_is_clamped_into_the_bounds() -> None:
    ctl = Controller(ControllerConfig(max_inflight=64), ReferencePolicy())
    ctl.on_poll([sample(capacity=10_000_000)], inflight=0, now=0.0)
    assert ctl.cap == 64


def test_min_equal_max_fixes_the_cap_against_growth_and_cuts() -> None:
    ctl = controller(start=32, min_inflight=32, max_inflight=32)
    for t in range(1, 4):
        turnover(ctl, now=t)
        ctl.on_poll(PREEMPT, inflight=32, now=t + 0.5)
        assert ctl.cap == 32


# -- growth ---------------------------------------------------------------------------------


def test_grow_each_completion_multiplies_the_cap_by_1_25_to_the_one_over_n() -> None:
    ctl = controller(start=100)
    complete(ctl, 30, now=1.0, pool=100)
    stats = ctl.make_stats(1.0)
    assert stats.turnover == pytest.approx(0.3)
    assert ctl.cap == math.floor(100 * 1.25**0.3)


@pytest.mark.parametrize("start", [10, 100, 1000])
def test_grow_one_full_turnover_grows_the_cap_by_a_quarter_at_any_scale(start: int) -> None:
    ctl = controller(start=start, max_inflight=10_000)
    while ctl.make_stats(1.0).turnover < 1.0:
        complete(ctl, 1, now=1.0)  # the pool keeps filling the cap as it grows
    replaced = ctl.make_stats(1.0).turnover
    assert replaced < 1.0 + 1.0 / start
    assert ctl.cap == math.floor(start * 1.25**replaced + 1e-6)
    assert ctl.cap >= math.floor(start * 1.25)


@pytest.mark.parametrize("start", [1, 2, 5, 9])
def test_f6_growth_works_at_caps_1_2_5_9(start: int) -> None:
    ctl = controller(start=start)
    for t in range(1, 5):
        ctl.on_poll([sample()], inflight=ctl.cap, now=float(t) / 10)
        turnover(ctl, now=float(t) / 10)
    assert ctl.cap > start


def test_one_poll_licenses_one_turnover_of_growth_however_many_complete() -> None:
    ctl = controller(start=100)
    for _ in range(4):
        turnover(ctl, now=0.5)
    assert ctl.cap == 125
    ctl.on_poll([sample()], inflight=125, now=1.0)
    for _ in range(4):
        turnover(ctl, now=1.5)
    assert ctl.cap == math.floor(100 * 1.25 * 1.25)


def test_turnovers_per_poll_zero_grows_between_polls_like_the_reference() -> None:
    ctl = controller(start=100, turnovers_per_poll=0.0)
    for _ in range(4):
        turnover(ctl, now=0.5)
    assert ctl.cap > math.floor(100 * 1.25 * 1.25)  # more than two turnovers' growth


def test_no_growth_after_a_soft_poll() -> None:
    ctl = controller()
    ctl.on_poll([sample(kv=0.65)], inflight=100, now=1.0)
    assert complete(ctl, 100, now=2.0) == []
    assert ctl.cap == 100


def test_no_growth_while_capacity_requests_queue_even_on_a_clear_poll() -> None:
    ctl = controller()
    ctl.on_poll([sample(waiting=1, waiting_capacity=1)], inflight=100, now=1.0)
    assert ctl.make_stats(1.0).signal is Signal.CLEAR
    assert complete(ctl, 100, now=2.0) == []


def test_no_growth_while_draining() -> None:
    ctl = controller()
    ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    assert ctl.draining
    ctl.on_poll(CLEAR, inflight=100, now=2.0)  # still above the cut cap: latch holds
    assert complete(ctl, 100, now=3.0, pool=80) == []
    assert ctl.cap == 80


def test_growth_is_recorded_at_most_once_per_poll_interval_while_the_cap_moves_each_time() -> None:
    ctl = controller(start=1000, max_inflight=2000)
    grows, caps = [], set()
    for _ in range(1000):
        grows += complete(ctl, 1, now=1.0)
        caps.add(ctl.cap)
    assert len(caps) > 200  # the cap moved with the completions...
    assert [(d.kind, d.cap_before, d.cap_after) for d in grows] == [
        (DecisionKind.GROW, 1000, 1001)  # ...and only its first step went on record at once
    ]
    grown = ctl.cap
    (summary,) = ctl.on_poll(CLEAR, inflight=grown, now=5.0)
    assert (summary.kind, summary.cap_before, summary.cap_after) == (DecisionKind.GROW, 1001, grown)
    assert complete(ctl, 100, now=6.0) == []  # the poll's record was this interval's one
    (summary,) = ctl.on_poll(CLEAR, inflight=ctl.cap, now=10.0)
    assert (summary.cap_before, summary.cap_after) == (grown, ctl.cap)


def test_growth_not_yet_recorded_goes_on_record_before_the_next_decision() -> None:
    ctl = controller(start=100)
    complete(ctl, 100, now=1.0)
    grown = ctl.cap
    (grow, cut) = ctl.on_poll(PREEMPT, inflight=grown, now=5.0)
    assert (grow.kind, grow.cap_before, grow.cap_after) == (DecisionKind.GROW, 101, grown)
    assert (cut.kind, cut.cap_before, cut.cap_after) == (DecisionKind.CUT, grown, int(0.8 * grown))


def test_an_operator_command_says_what_growth_it_takes_in() -> None:
    ctl = controller(start=100)
    complete(ctl, 50, now=1.0)  # 100 -> 101 on record at once, the rest of the way not yet
    grown = ctl.cap
    pin = ctl.pin(200, 60.0, now=2.0)
    assert (pin.cap_before, pin.cap_after) == (grown, 200)
    assert pin.reason.endswith("(operator); the policy had grown it from 101 since its last record")
    assert ctl.on_poll(CLEAR, inflight=200, now=5.0) == ()  # the pin took the growth in


@pytest.mark.parametrize("policy", [ReferencePolicy, PacerPolicy])
def test_f2_sustained_mild_overload_never_raises_the_cap(policy) -> None:
    ctl = controller(policy(), start=200)
    mild = [sample(kv=0.5, running=190, waiting=10, waiting_capacity=10)]
    caps = []
    for t in range(1, 60):
        ctl.on_poll(mild, inflight=200, now=5.0 * t)
        complete(ctl, 40, now=5.0 * t + 1.0, pool=200)
        caps.append(ctl.cap)
    assert caps == sorted(caps, reverse=True)
    assert caps[-1] <= 200


def test_growth_stops_at_the_ceiling_of_the_policy_reading() -> None:
    ctl = controller(PacerPolicy(), start=200, max_inflight=1000)
    ctl.on_poll(PREEMPT, inflight=200, now=5.0)  # cut to 170, knee 200: ceiling 180
    low_kv = [sample(kv=0.1, running=170)]
    ctl.on_poll(low_kv, inflight=170, now=10.0)  # drained: released
    assert not ctl.draining
    ctl.on_poll(low_kv, inflight=170, now=15.0)  # three polls of low KV
    ctl.on_poll(low_kv, inflight=170, now=20.0)
    turnover(ctl, now=21.0)  # x1.875 would make 318
    assert ctl.cap == 180


def test_growth_when_the_pool_is_exactly_the_binding_fraction_of_the_cap() -> None:
    ctl = controller(start=100)
    complete(ctl, 5, now=1.0, pool=90)  # 90 = 0.9 x 100 binds: 1.25 ** (5 / 90) passes 101
    assert ctl.cap == 101


def test_no_growth_when_the_cap_does_not_bind() -> None:
    ctl = controller(start=100)
    assert complete(ctl, 200, now=1.0, pool=89) == []
    complete(ctl, 1, now=1.0, pool=90)
    assert ctl.make_stats(1.0).cap == 100  # one completion at n = 90 is +0.25 %: not a unit


def test_queued_work_that_pacing_holds_back_binds_the_cap() -> None:
    ctl = controller(start=100)
    assert complete(ctl, 200, now=1.0, pool=80, demand=80) == []  # nothing queued: unused
    complete(ctl, 40, now=1.0, pool=80, demand=90)  # a window's admissions would make 90
    assert ctl.cap > 100


def test_f7_failed_or_empty_episodes_never_grow_the_cap() -> None:
    ctl = controller()
    assert complete(ctl, 300, now=1.0, ok=False) == []
    assert complete(ctl, 300, now=1.0, tokens=0) == []
    assert ctl.cap == 100


def test_f8_no_growth_once_the_last_good_poll_is_older_than_the_ttl() -> None:
    ctl = controller()
    assert complete(ctl, 10, now=14.9)  # 15 s TTL not reached yet: grows
    cap = ctl.cap
    frozen = complete(ctl, 200, now=15.0)
    assert kinds(frozen) == [DecisionKind.GROW, DecisionKind.STALE_FREEZE]
    assert (frozen[0].cap_after, frozen[1].alert) == (cap, True)
    assert ctl.cap == cap
    thaw = ctl.on_poll(CLEAR, inflight=cap, now=16.0)
    assert kinds(thaw) == [DecisionKind.STALE_THAW]
    assert complete(ctl, 50, now=17.0)


# -- stale metrics ---------------------------------------------------------------------------


def test_a_new_controller_that_never_gets_a_complete_poll_says_so_after_the_ttl() -> None:
    ctl = Controller(ControllerConfig(initial_inflight=50), ReferencePolicy())
    partial = [sample("a"), sample("b", health=EngineHealth.STALE)]
    ctl.on_poll(partial, inflight=0, now=0.0)
    assert ctl.on_poll(partial, inflight=50, now=14.0) == ()
    (frozen,) = ctl.on_poll(partial, inflight=50, now=15.0)
    assert (frozen.kind, frozen.alert) == (DecisionKind.STALE_FREEZE, True)
    assert ctl.on_poll(partial, inflight=50, now=20.0) == ()  # said once


def test_a_restored_controller_whose_metrics_never_come_raises_a_stale_freeze() -> None:
    stored = controller(start=100).to_json(now=1.0)
    restored, _ = Controller.restore(ControllerConfig(), ReferencePolicy(), stored, now=100.0)
    assert complete(restored, 10, now=114.9) == []
    frozen = complete(restored, 10, now=115.0)
    assert kinds(frozen) == [DecisionKind.STALE_FREEZE]
    assert "no complete poll for 15.0 s" in frozen[0].reason


def test_f10_one_stale_engine_does_not_block_the_others_decisions() -> None:
    ctl = controller(start=100)
    stale = sample("a", health=EngineHealth.STALE, kv=0.0, running=0)
    (cut,) = ctl.on_poll([stale, sample("b", preemptions=2)], inflight=100, now=1.0)
    assert cut.kind is DecisionKind.CUT


def test_f10_a_stale_engine_never_makes_the_pool_look_clear_for_growth() -> None:
    ctl = controller(start=100)
    stale = sample("a", health=EngineHealth.STALE, kv=0.0, running=0)
    ctl.on_poll([stale, sample("b")], inflight=100, now=1.0)
    assert complete(ctl, 100, now=2.0) == []
    assert ctl.make_stats(2.0).growth == 1.0


def test_f10_all_engines_stale_freezes_and_says_so_once() -> None:
    ctl = controller(start=100)
    blind = [sample("a", health=EngineHealth.STALE), sample("b", health=EngineHealth.DOWN)]
    (freeze,) = ctl.on_poll(blind, inflight=100, now=1.0)
    assert (freeze.kind, freeze.signal, freeze.alert) == (
        DecisionKind.STALE_FREEZE,
        Signal.UNKNOWN,
        True,
    )
    assert "1 stale, 1 down" in freeze.reason
    assert ctl.on_poll(blind, inflight=100, now=2.0) == ()
    assert complete(ctl, 200, now=3.0) == []
    assert ctl.cap == 100


def test_a_down_engine_has_left_the_pool_and_does_not_block_growth() -> None:
    ctl = controller(start=100)
    ctl.on_poll([sample("a"), sample("b", health=EngineHealth.DOWN)], inflight=100, now=1.0)
    assert complete(ctl, 50, now=2.0)


# -- in-flight reconciliation ----------------------------------------------------------------


def test_f9_inflight_is_reconciled_with_engine_running_plus_waiting() -> None:
    ctl = controller(start=100)
    ctl.on_poll([sample(running=90, waiting=30, waiting_capacity=30)], inflight=100, now=1.0)
    stats = ctl.make_stats(1.0)
    assert (stats.engine_requests, stats.engine_requests_over_permits) == (120, 20)


def test_f9_engine_requests_over_the_permits_for_6_polls_raise_one_alert() -> None:
    ctl = controller(start=100)
    leaky = [sample(running=100, waiting=20, waiting_capacity=0)]
    for t in range(1, 6):
        assert ctl.on_poll(leaky, inflight=100, now=float(t)) == ()
    (alert,) = ctl.on_poll(leaky, inflight=100, now=6.0)
    assert (alert.kind, alert.cause, alert.alert) == (
        DecisionKind.RECONCILE,
        Cause.REQUESTS_OVER_PERMITS,
        True,
    )
    assert (alert.cap_before, alert.cap_after) == (100, 100)
    assert "120 requests" in alert.reason and "100 permits" in alert.reason
    assert ctl.on_poll(leaky, inflight=100, now=7.0) == ()  # one alert per stretch
    ctl.on_poll(CLEAR, inflight=100, now=8.0)
    assert all(ctl.on_poll(leaky, inflight=100, now=t) == () for t in (9.0, 10.0, 11.0))


# -- bad input, observability ----------------------------------------------------------------


def test_bad_samples_are_refused_and_change_nothing() -> None:
    ctl = controller(start=100)
    before = ctl.to_json(1.0)
    with pytest.raises(ValueError, match="kv_usage"):
        ctl.on_poll([sample(kv=1.5)], inflight=100, now=1.0)
    with pytest.raises(ValueError, match="inflight"):
        ctl.on_poll(CLEAR, inflight=-1, now=1.0)
    with pytest.raises(ValueError, match="pool"):
        ctl.on_completion(EpisodeCompletion(tokens=5, ok=True, pool=0), now=1.0)
    assert ctl.to_json(1.0) == before


def test_stats_carry_the_gauges_of_the_reference() -> None:
    ctl = controller(start=100)
    ctl.on_poll([sample(kv=0.3, capacity=123_000)], inflight=95, now=1.0)
    complete(ctl, 10, now=2.0, pool=100)
    stats = ctl.make_stats(2.0)
    assert stats.cap == ctl.cap
    assert stats.inflight == 99
    assert stats.turnover == pytest.approx(10 / 100)
    assert stats.kv_capacity_tokens == 123_000
    assert stats.signal is Signal.CLEAR
    assert stats.growth == pytest.approx(1.25)
