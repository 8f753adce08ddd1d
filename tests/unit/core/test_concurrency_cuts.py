"""Cuts, trims and the drain latch (REFERENCE section 1; F3, F4, F14), and the latch escape
for a cut too shallow for the engines."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import controller, sample
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.decisions import Cause, DecisionKind, Signal
from workers.core.samples import EngineHealth

PREEMPT = [sample(preemptions=3)]
CLEAR = [sample()]
CLEAR_TWO = [sample("a"), sample("b")]


def kinds(decisions) -> list[DecisionKind]:
    return [d.kind for d in decisions]


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


# -- incomplete polls never release a drain (a stale engine's late preemptions) ---------------


@pytest.mark.parametrize("policy", [ReferencePolicy, PacerPolicy])
def test_a_poll_with_a_stale_engine_keeps_the_drain_so_late_preemptions_cut_once(policy) -> None:
    """The overloaded engine misses a scrape after the cut; its next good scrape still carries
    the preemptions from before the cut. Released on the incomplete poll, the latch would let
    them cut again, escalated."""
    ctl = controller(policy(), start=100)
    a_preempts = [sample("a", preemptions=4), sample("b")]
    a_stale = [sample("a", health=EngineHealth.STALE, kv=0.5), sample("b")]
    a_late = [sample("a", preemptions=3), sample("b")]
    (cut,) = ctl.on_poll(a_preempts, inflight=100, now=1.0)
    assert cut.kind is DecisionKind.CUT
    assert ctl.on_poll(a_stale, inflight=cut.cap_after, now=2.0) == ()
    assert ctl.draining
    assert ctl.on_poll(a_late, inflight=cut.cap_after, now=3.0) == ()
    (release,) = ctl.on_poll(CLEAR_TWO, inflight=cut.cap_after, now=4.0)
    assert release.kind is DecisionKind.DRAIN_RELEASE
    assert (ctl.make_stats(4.0).cuts, ctl.cap) == (1, cut.cap_after)


def test_a_poll_with_a_stale_engine_never_reads_clear() -> None:
    ctl = controller(start=100)
    ctl.on_poll([sample("a", health=EngineHealth.STALE), sample("b")], inflight=100, now=1.0)
    stats = ctl.make_stats(1.0)
    assert (stats.signal, stats.cause, stats.growth) == (Signal.SOFT, Cause.STALE, 1.0)
