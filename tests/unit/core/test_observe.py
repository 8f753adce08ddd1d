"""Observe-only: the policy decides in the shadow, the real cap stays put."""

from __future__ import annotations

import json

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import CommandRejected, ObserveOnly
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig, EpisodeCompletion
from workers.core.decisions import DecisionKind


def observing() -> ObserveOnly:
    return ObserveOnly(Controller(ControllerConfig(), ReferencePolicy()))


def test_the_start_cap_applies_and_later_decisions_do_not() -> None:
    run = observing()
    (boot,) = run.on_poll([sample(capacity=100_000)], inflight=0, now=0.0)
    assert (boot.kind, boot.applied, run.cap) == (DecisionKind.BOOTSTRAP, True, 100)
    grew = []
    for _ in range(100):
        grew += run.on_completion(EpisodeCompletion(tokens=9, ok=True, pool=100), now=1.0)
    grew += run.on_poll([sample()], inflight=100, now=5.0)
    assert run.cap == 100
    assert grew
    assert all(not d.applied and d.cap_after == 100 for d in grew)
    assert grew[-1].shadow_after == run.shadow.cap > 100
    assert grew[-1].reason.startswith("Observe-only, not applied: Increased concurrency")


def test_an_observed_cut_sheds_nothing() -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    (cut,) = run.on_poll([sample(preemptions=4)], inflight=100, now=1.0)
    assert (cut.kind, cut.shed, cut.cap_after, cut.shadow_after) == (DecisionKind.CUT, 0, 100, 80)


def test_after_an_observed_cut_the_shadow_drains_and_keeps_deciding() -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    run.on_poll([sample(preemptions=4)], inflight=100, now=1.0)  # shadow 100 -> 80
    # Nothing was shed, so the real pool stays at 100, above the shadow's cap.
    (release,) = run.on_poll([sample()], inflight=100, now=2.0)
    assert (release.kind, release.applied) == (DecisionKind.DRAIN_RELEASE, False)
    (cut,) = run.on_poll([sample(preemptions=1)], inflight=100, now=3.0)
    assert (cut.kind, cut.shadow_before, cut.shadow_after, cut.cap_after) == (
        DecisionKind.CUT,
        80,
        50,
        100,
    )


def test_after_an_observed_cut_the_shadow_grows_again_on_evidence() -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    run.on_poll([sample(preemptions=4)], inflight=100, now=1.0)
    run.on_poll([sample()], inflight=100, now=2.0)
    grew = [
        d
        for _ in range(100)
        for d in run.on_completion(EpisodeCompletion(tokens=9, ok=True, pool=100), now=3.0)
    ]
    assert [(d.kind, d.applied) for d in grew] == [(DecisionKind.GROW, False)]
    assert run.cap == 100
    assert run.shadow.cap > 80


def test_set_moves_the_real_cap_and_pins_are_refused() -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    decision = run.set(40, now=1.0)
    assert (decision.cap_before, decision.cap_after, run.cap) == (100, 40, 40)
    with pytest.raises(CommandRejected, match="use set"):
        run.pin(50, 10.0, now=1.0)
    with pytest.raises(CommandRejected, match="use set"):
        run.release(now=1.0)
    with pytest.raises(ValueError, match="cap must be"):
        run.set(0, now=1.0)


def test_stats_show_the_real_cap_and_the_policy_cap() -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    run.on_poll([sample(preemptions=4)], inflight=100, now=1.0)
    stats = run.make_stats(1.0)
    assert (stats.cap, stats.policy_cap) == (100, 80)


def test_state_round_trips_with_the_applied_cap() -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    run.set(70, now=1.0)
    stored = json.loads(json.dumps(run.to_json(now=2.0)))
    restored, decision = ObserveOnly.restore(ControllerConfig(), ReferencePolicy(), stored, now=0.0)
    assert (restored.cap, decision.kind, decision.applied) == (70, DecisionKind.RESTORE, False)
    with pytest.raises(ValueError, match="lacks field"):
        ObserveOnly.restore(ControllerConfig(), ReferencePolicy(), {"x": 1}, now=0.0)


def test_a_stored_applied_cap_outside_new_bounds_is_clamped_like_the_shadow_cap() -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    run.set(500, now=1.0)
    stored = run.to_json(now=2.0)
    restored, decision = ObserveOnly.restore(
        ControllerConfig(max_inflight=200), ReferencePolicy(), stored, now=0.0
    )
    assert (restored.cap, restored.shadow.cap) == (200, 100)
    assert "stored applied cap 500 out of bounds" in decision.reason


@pytest.mark.parametrize("applied", [70.5, "70", True])
def test_a_stored_applied_cap_that_is_not_an_integer_is_refused(applied) -> None:
    run = observing()
    run.on_poll([sample()], inflight=0, now=0.0)
    stored = run.to_json(now=2.0)
    stored["observe_applied"] = applied
    with pytest.raises(ValueError, match="observe_applied"):
        ObserveOnly.restore(ControllerConfig(), ReferencePolicy(), stored, now=0.0)


def test_a_refused_applied_cap_loads_nothing_into_the_policy() -> None:
    run = observing()
    run.on_poll([sample(waiting=5, waiting_capacity=5)], inflight=100, now=0.0)
    stored = run.to_json(now=2.0)
    assert stored["shadow"]["policy_state"] != ReferencePolicy().to_json()
    stored["observe_applied"] = "70"
    policy = ReferencePolicy()
    fresh = policy.to_json()
    with pytest.raises(ValueError, match="observe_applied"):
        ObserveOnly.restore(ControllerConfig(), policy, stored, now=0.0)
    assert policy.to_json() == fresh
