"""Operator commands (pin, set, release) with the policy deciding in the shadow, and the
controller's state across a worker restart."""

from __future__ import annotations

import json
import math

import pytest

from tests.unit.core.builders import complete, controller, sample
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig
from workers.core.decisions import DecisionKind

PREEMPT = [sample(preemptions=3)]
CLEAR = [sample()]


def kinds(decisions) -> list[DecisionKind]:
    return [d.kind for d in decisions]


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


def test_a_pins_time_runs_while_the_run_is_away_and_lapses_at_its_ttl() -> None:
    ctl = controller(start=100)
    ctl.pin(60, 45.0, now=0.0)
    stored = json.loads(json.dumps(ctl.to_json(now=5.0)))  # 40 s left when saved
    back, _ = Controller.restore(ControllerConfig(), ReferencePolicy(), stored, now=0.0, away=25.0)
    assert back.make_stats(0.0).pinned_for == pytest.approx(15.0)
    assert DecisionKind.PIN_EXPIRED not in kinds(back.on_poll(CLEAR, inflight=60, now=14.0))
    assert DecisionKind.PIN_EXPIRED in kinds(back.on_poll(CLEAR, inflight=60, now=15.5))
    gone, _ = Controller.restore(ControllerConfig(), ReferencePolicy(), stored, now=0.0, away=90.0)
    assert DecisionKind.PIN_EXPIRED in kinds(gone.on_poll(CLEAR, inflight=60, now=0.5))


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
