"""The controller's shared rules (REFERENCE section 1) and the failures others shipped (F3-F10,
F14), each driven by a few polls and completions against the reference policy."""

from __future__ import annotations

import json
import math

import pytest

from tests.unit.core.builders import complete, controller, sample, turnover
from workers.core.concurrency import Controller
from workers.core.control_records import ControllerConfig, EpisodeCompletion
from workers.core.decisions import Cause, DecisionKind, Signal
from workers.core.policies.fixed import FixedPolicy
from workers.core.policies.pacer import PacerPolicy
from workers.core.policies.reference import ReferencePolicy
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
    assert pin.reason.endswith("(operator); policy cap had grown from 101 unrecorded")
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


def test_growth_when_the_pool_is_exactly_the_binding_fraction_of_the_cap() -> None:
    ctl = controller(start=100)
    complete(ctl, 5, now=1.0, pool=90)  # 90 = 0.9 x 100 binds: 1.25 ** (5 / 90) passes 101
    assert ctl.cap == 101


def test_no_growth_when_the_cap_does_not_bind() -> None:
    ctl = controller(start=100)
    assert complete(ctl, 200, now=1.0, pool=89) == []
    complete(ctl, 1, now=1.0, pool=90)
    assert ctl.make_stats(1.0).cap == 100  # one completion at n = 90 is +0.25 %: not a unit


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


# -- cuts and the drain latch ----------------------------------------------------------------


def test_cut_on_preemption_to_0_8_of_inflight_and_shed_the_excess() -> None:
    ctl = controller(start=500)
    (cut,) = ctl.on_poll(PREEMPT, inflight=500, now=1.0)
    assert (cut.kind, cut.cause, cut.signal) == (DecisionKind.CUT, Cause.PREEMPTION, Signal.HARD)
    assert (cut.cap_before, cut.cap_after, cut.shed) == (500, 400, 100)
    assert cut.reason.startswith("Decreased concurrency 500 -> 400 (preemption)")


def test_cut_on_queue_overload_to_0_9_of_inflight() -> None:
    ctl = controller(start=500)
    queued = [sample(running=100, waiting=60, waiting_capacity=60)]
    for t in range(1, 6):
        assert ctl.on_poll(queued, inflight=500, now=float(t)) == ()
    (cut,) = ctl.on_poll(queued, inflight=500, now=6.0)
    assert (cut.cause, cut.cap_after, cut.shed) == (Cause.QUEUE_OVERLOAD, 450, 50)


def test_f14_cuts_are_sized_in_pool_units_not_engine_running() -> None:
    ctl = controller(start=400)
    (cut,) = ctl.on_poll([sample(running=100, preemptions=1)], inflight=400, now=1.0)
    assert cut.cap_after == 320


def test_cut_never_raises_the_cap() -> None:
    ctl = controller(start=100)
    ctl.set(50, now=0.5)
    (cut,) = ctl.on_poll(PREEMPT, inflight=100, now=1.0)  # 0.8 x 100 = 80 > 50
    assert (cut.cap_before, cut.cap_after, cut.shed) == (50, 50, 50)


def test_f4_repeated_preemption_deltas_during_drain_do_not_cut_again() -> None:
    ctl = controller(start=1024, max_inflight=1024)
    ctl.on_poll(PREEMPT, inflight=1024, now=1.0)
    for t in range(2, 30):
        assert ctl.on_poll(PREEMPT, inflight=1000, now=float(t)) == ()
    assert ctl.cap == 819
    assert ctl.make_stats(30.0).suppressed_cuts == 28


def test_a_cut_too_shallow_for_the_engines_is_followed_by_another_after_stuck_polls() -> None:
    """The pool sits at the cut cap and the engines still preempt: the cap is the cause."""
    ctl = controller(start=100)
    (cut,) = ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    assert cut.cap_after == 80
    assert ctl.on_poll(PREEMPT, inflight=80, now=2.0) == ()
    assert ctl.on_poll(PREEMPT, inflight=80, now=3.0) == ()
    (release,) = ctl.on_poll(PREEMPT, inflight=80, now=4.0)
    assert release.kind is DecisionKind.DRAIN_RELEASE
    assert "the cap itself is too high" in release.reason
    (second,) = ctl.on_poll(PREEMPT, inflight=80, now=5.0)
    assert (second.kind, second.cap_after, second.shed) == (DecisionKind.CUT, 40, 40)
    assert "escalated" in second.reason


def test_drain_stuck_polls_zero_holds_an_overloaded_cap_like_the_reference() -> None:
    ctl = controller(start=100, drain_stuck_polls=0)
    ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    for t in range(2, 40):
        assert ctl.on_poll(PREEMPT, inflight=80, now=float(t)) == ()
    assert (ctl.cap, ctl.draining) == (80, True)


def test_f3_a_queue_that_outlasts_the_drain_does_not_cut_again_right_after_release() -> None:
    ctl = controller(start=500)
    queued = [sample(running=100, waiting=60, waiting_capacity=60)]
    for t in range(1, 7):
        ctl.on_poll(queued, inflight=500, now=float(t))
    assert (ctl.make_stats(6.0).cuts, ctl.cap) == (1, 450)
    # The backlog from before the cut stays above the ratio through the drain and after it.
    for t in range(7, 10):
        assert ctl.on_poll(queued, inflight=460, now=float(t)) == ()
    (release,) = ctl.on_poll(queued, inflight=450, now=10.0)
    assert release.kind is DecisionKind.DRAIN_RELEASE
    for t in range(11, 16):
        assert ctl.on_poll(queued, inflight=450, now=float(t)) == ()
    assert (ctl.make_stats(16.0).cuts, ctl.cap) == (1, 450)


def test_a_queue_overload_within_6_polls_after_a_release_is_escalated_to_0_5() -> None:
    ctl = controller(start=100)
    ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    ctl.on_poll(CLEAR, inflight=80, now=2.0)  # release
    queued = [sample(running=40, waiting=30, waiting_capacity=30)]
    for t in range(3, 8):
        assert ctl.on_poll(queued, inflight=80, now=float(t)) == ()
    (cut,) = ctl.on_poll(queued, inflight=80, now=8.0)  # sixth poll after the release
    assert (cut.cause, cut.cap_after, cut.shed) == (Cause.QUEUE_OVERLOAD, 40, 40)
    assert "escalated" in cut.reason


def test_drain_releases_only_below_the_cap_on_a_poll_that_is_not_hard() -> None:
    ctl = controller(start=100)
    ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    assert ctl.on_poll(CLEAR, inflight=81, now=2.0) == ()
    assert ctl.on_poll(PREEMPT, inflight=80, now=3.0) == ()
    (release,) = ctl.on_poll(CLEAR, inflight=80, now=4.0)
    assert release.kind is DecisionKind.DRAIN_RELEASE
    assert not ctl.draining


def test_a_cut_within_6_polls_after_a_release_is_escalated_to_0_5() -> None:
    ctl = controller(start=100)
    ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    ctl.on_poll(CLEAR, inflight=80, now=2.0)  # release
    for t in range(3, 8):
        ctl.on_poll(CLEAR, inflight=80, now=float(t))
    (cut,) = ctl.on_poll(PREEMPT, inflight=80, now=8.0)  # sixth poll after the release
    assert cut.cap_after == 40
    assert "escalated" in cut.reason


def test_a_cut_seven_polls_after_a_release_is_not_escalated() -> None:
    ctl = controller(start=100)
    ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    ctl.on_poll(CLEAR, inflight=80, now=2.0)
    for t in range(3, 9):
        ctl.on_poll(CLEAR, inflight=80, now=float(t))
    (cut,) = ctl.on_poll(PREEMPT, inflight=80, now=9.0)
    assert cut.cap_after == 64


def test_trim_between_0_8_and_0_9_stops_admission_and_sheds_nothing() -> None:
    ctl = controller(start=100)
    (trim,) = ctl.on_poll([sample(kv=0.85)], inflight=100, now=1.0)
    assert (trim.kind, trim.cause, trim.signal) == (
        DecisionKind.TRIM,
        Cause.KV_PRESSURE,
        Signal.SOFT,
    )
    assert (trim.cap_before, trim.cap_after, trim.shed) == (100, 82, 0)


def test_trim_above_0_9_sheds_the_excess() -> None:
    ctl = controller(start=100)
    (trim,) = ctl.on_poll([sample(kv=0.95)], inflight=100, now=1.0)
    assert (trim.kind, trim.cap_after, trim.shed) == (DecisionKind.TRIM, 73, 27)


def test_a_trim_sets_no_drain_latch_so_a_preemption_still_cuts() -> None:
    ctl = controller(start=100)
    ctl.on_poll([sample(kv=0.85)], inflight=100, now=1.0)
    assert not ctl.draining
    (cut,) = ctl.on_poll(PREEMPT, inflight=100, now=2.0)
    assert (cut.kind, cut.cap_after) == (DecisionKind.CUT, 80)


def test_no_second_trim_within_6_polls_of_the_first() -> None:
    ctl = controller(start=100)
    ctl.on_poll([sample(kv=0.85)], inflight=100, now=1.0)
    for t in range(2, 7):
        assert ctl.on_poll([sample(kv=0.95)], inflight=82, now=float(t)) == ()
    (trim,) = ctl.on_poll([sample(kv=0.95)], inflight=82, now=7.0)
    assert (trim.kind, trim.cap_before, trim.cap_after) == (DecisionKind.TRIM, 82, 60)


def test_no_trim_while_draining() -> None:
    ctl = controller(start=100)
    ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    assert ctl.on_poll([sample(kv=0.95)], inflight=100, now=2.0) == ()
    assert ctl.cap == 80


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


# -- operator commands -----------------------------------------------------------------------


def test_pin_holds_the_cap_while_the_policy_grows_in_the_shadow() -> None:
    ctl = controller(start=100)
    pin = ctl.pin(200, 300.0, now=0.5)
    assert (pin.kind, pin.cap_before, pin.cap_after) == (DecisionKind.PIN, 100, 200)
    assert (pin.shadow_before, pin.shadow_after) == (100, 100)
    grew = complete(ctl, 200, now=1.0, pool=200)  # one turnover of the pinned pool
    grew += ctl.on_poll(CLEAR, inflight=200, now=5.0)
    assert ctl.cap == 200
    assert {d.cap_after for d in grew} == {200}
    assert grew[-1].shadow_after == ctl.make_stats(5.0).policy_cap == 125


def test_a_pin_above_the_shadow_cap_leaves_the_shadow_deciding_after_a_cut() -> None:
    ctl = controller(start=100)
    ctl.pin(200, 300.0, now=0.5)
    (cut,) = ctl.on_poll(PREEMPT, inflight=200, now=1.0)
    assert (cut.kind, cut.shadow_after, ctl.draining) == (DecisionKind.CUT, 100, True)
    # The pinned pool stays at 200, above the shadow's 100: what the shadow would have had
    # after its cut was at most its cap, so the drain ends on the first poll that is not hard.
    (release,) = ctl.on_poll(CLEAR, inflight=200, now=2.0)
    assert release.kind is DecisionKind.DRAIN_RELEASE
    complete(ctl, 100, now=3.0, pool=200)
    assert ctl.make_stats(3.0).policy_cap > 100


def test_a_pin_below_the_shadow_cap_starves_the_shadow_of_evidence_to_grow() -> None:
    ctl = controller(start=100)
    ctl.pin(60, 300.0, now=0.5)
    assert complete(ctl, 300, now=1.0, pool=60) == []
    assert ctl.make_stats(1.0).policy_cap == 100


def test_pin_lapses_after_its_ttl_and_the_shadow_cap_takes_over() -> None:
    ctl = controller(start=100)
    ctl.pin(60, 10.0, now=0.0)
    assert ctl.on_poll(CLEAR, inflight=60, now=9.9) == ()
    (expired,) = ctl.on_poll(CLEAR, inflight=60, now=10.0)
    assert (expired.kind, expired.cap_before, expired.cap_after) == (
        DecisionKind.PIN_EXPIRED,
        60,
        100,
    )


def test_release_hands_the_cap_back_to_the_policy() -> None:
    ctl = controller(start=100)
    ctl.pin(300, 60.0, now=0.0)
    release = ctl.release(now=1.0)
    assert (release.kind, release.cap_before, release.cap_after) == (DecisionKind.RELEASE, 300, 100)
    assert ctl.cap == 100


def test_release_without_a_pin_changes_nothing_and_says_so() -> None:
    ctl = controller(start=100)
    release = ctl.release(now=1.0)
    assert (release.cap_before, release.cap_after) == (100, 100)
    assert "no pin" in release.reason


def test_set_moves_the_cap_once_and_adaptation_continues_from_there() -> None:
    ctl = controller(start=100)
    decision = ctl.set(200, now=0.5)
    assert (decision.kind, decision.cap_before, decision.cap_after) == (DecisionKind.SET, 100, 200)
    complete(ctl, 100, now=1.0, pool=200)  # half a turnover
    assert ctl.cap == math.floor(200 * 1.25**0.5)


def test_set_ends_a_pin() -> None:
    ctl = controller(start=100)
    ctl.pin(60, 300.0, now=0.0)
    decision = ctl.set(80, now=1.0)
    assert "pin released" in decision.reason
    assert decision.shadow_after is None
    assert ctl.make_stats(1.0).pinned_for is None


def test_a_preemption_cut_does_not_pierce_a_pin_but_raises_an_alert() -> None:
    ctl = controller(start=100)
    ctl.pin(100, 300.0, now=0.0)
    (cut,) = ctl.on_poll(PREEMPT, inflight=100, now=1.0)
    assert cut.kind is DecisionKind.CUT
    assert (cut.cap_before, cut.cap_after, cut.shed) == (100, 100, 0)
    assert (cut.shadow_before, cut.shadow_after) == (100, 80)
    assert cut.alert
    assert cut.reason.startswith("Pinned at 100 by operator; policy: Decreased concurrency")
    assert ctl.release(now=2.0).cap_after == 80


@pytest.mark.parametrize(
    "command",
    [
        lambda c: c.pin(0, 10.0, now=1.0),
        lambda c: c.pin(2000, 10.0, now=1.0),
        lambda c: c.pin(50, 0.0, now=1.0),
        lambda c: c.pin(50, math.inf, now=1.0),
        lambda c: c.set(1025, now=1.0),
        lambda c: c.set(10.5, now=1.0),
    ],
)
def test_commands_outside_the_bounds_are_refused_and_change_nothing(command) -> None:
    ctl = controller(start=100)
    before = ctl.to_json(1.0)
    with pytest.raises(ValueError, match="must be"):
        command(ctl)
    assert ctl.to_json(1.0) == before


# -- persistence -----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [ReferencePolicy, PacerPolicy, FixedPolicy])
def test_state_survives_a_json_round_trip_without_a_second_bootstrap(policy) -> None:
    ctl = Controller(ControllerConfig(), policy())
    ctl.on_poll([sample(capacity=50_000)], inflight=0, now=0.0)
    complete(ctl, 40, now=1.0, pool=50)
    ctl.pin(70, 100.0, now=2.0)
    stored = json.loads(json.dumps(ctl.to_json(now=10.0)))
    restored, decision = Controller.restore(ControllerConfig(), policy(), stored, now=500.0)
    assert decision.kind is DecisionKind.RESTORE
    assert restored.cap == 70
    assert restored.make_stats(500.0).policy_cap == ctl.make_stats(10.0).policy_cap
    assert restored.make_stats(500.0).pinned_for == pytest.approx(92.0)
    after = restored.on_poll([sample(capacity=900_000)], inflight=70, now=505.0)
    assert DecisionKind.BOOTSTRAP not in kinds(after)


def test_a_restored_controller_waits_for_a_fresh_poll_before_growing() -> None:
    ctl = controller(start=100)
    stored = ctl.to_json(now=1.0)
    restored, _ = Controller.restore(ControllerConfig(), ReferencePolicy(), stored, now=0.0)
    assert complete(restored, 100, now=1.0) == []
    restored.on_poll(CLEAR, inflight=100, now=2.0)
    assert complete(restored, 100, now=3.0)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(policy="pacer"), "policy"),
        (lambda d: d.update(format=99), "format"),
        (lambda d: d.pop("level"), "lacks field"),
        (lambda d: d.update(level="many"), "malformed"),
        (lambda d: d.update(level=-3), "malformed"),
    ],
)
def test_restore_refuses_state_it_cannot_trust(mutate, message) -> None:
    stored = controller().to_json(now=1.0)
    mutate(stored)
    with pytest.raises(ValueError, match=message):
        Controller.restore(ControllerConfig(), ReferencePolicy(), stored, now=0.0)


def test_restore_clamps_a_stored_cap_into_new_bounds_and_says_so() -> None:
    stored = controller(start=500).to_json(now=1.0)
    restored, decision = Controller.restore(
        ControllerConfig(max_inflight=200), ReferencePolicy(), stored, now=0.0
    )
    assert restored.cap == 200
    assert "out of bounds" in decision.reason


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
