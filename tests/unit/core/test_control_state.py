"""The controller's stored state: JSON shape and its validation."""

from __future__ import annotations

import json

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.concurrency import Controller
from workers.core.controller.latches import DrainLatch
from workers.core.controller.overrides import Pin
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig
from workers.core.controller.state import ControllerState, Kept, StoredPin, resume, save
from workers.core.decisions import DecisionKind


def state() -> ControllerState:
    return ControllerState(
        policy="reference",
        level=123.4,
        bootstrapped=True,
        draining=True,
        polls_since_release=3,
        hard_at_cap=2,
        suppressed_cuts=5,
        cuts=4,
        trims=7,
        turnover=17.5,
        pin=StoredPin(cap=60, remaining=42.0),
        policy_state={"polls_since_trim": 2},
    )


def test_state_survives_json() -> None:
    assert ControllerState.from_json(json.loads(json.dumps(state().to_json()))) == state()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format=1), "format"),
        (lambda d: d.pop("hard_at_cap"), "lacks field 'hard_at_cap'"),
        (lambda d: d.update(cuts=-1), "cuts must be an integer >= 0"),
        (lambda d: d.pop("turnover"), "lacks field 'turnover'"),
        (lambda d: d.update(level=float("nan")), "finite"),
        (lambda d: d.update(level=0), "finite"),
        (lambda d: d.update(pin={"cap": "x", "remaining": 1}), "pin cap"),
        (lambda d: d.update(pin=[60, 1.0]), "pin must be"),
        (lambda d: d.update(policy_state=[1, 2]), "policy_state must be"),
        (lambda d: d.update(bootstrapped="false"), "bootstrapped must be true or false"),
        (lambda d: d.update(draining=1), "draining must be true or false"),
        (lambda d: d.update(turnover=float("nan")), "turnover must be a finite number >= 0"),
        (lambda d: d.update(turnover=-1.0), "turnover must be a finite number >= 0"),
        (lambda d: d.update(polls_since_release=-1), "polls_since_release must be an integer"),
        (lambda d: d.update(polls_since_release=2.5), "polls_since_release must be an integer"),
        (lambda d: d.update(polls_since_release=True), "polls_since_release must be an integer"),
        (lambda d: d.update(pin={"cap": 60.7, "remaining": 1}), "pin cap must be an integer"),
        (lambda d: d.update(pin={"cap": 0, "remaining": 1}), "pin cap must be an integer"),
        (lambda d: d.update(pin={"cap": 6, "remaining": "soon"}), "pin remaining"),
        (lambda d: d.update(level=float("inf")), "level must be a finite number > 0"),
        (lambda d: d.update(level="12"), "level must be a finite number > 0"),
        (lambda d: d.update(level=10**400), "level must be a finite number > 0"),
        (lambda d: d.update(turnover=10**400), "turnover must be a finite number"),
        (lambda d: d.update(policy=3), "policy must be a string"),
    ],
)
def test_state_that_cannot_be_trusted_is_refused(mutate, message) -> None:
    data = state().to_json()
    mutate(data)
    with pytest.raises(ValueError, match=message):
        ControllerState.from_json(data)


def test_a_lapsed_pin_and_a_state_without_a_pin_are_both_valid() -> None:
    data = state().to_json()
    data["pin"] = {"cap": 60, "remaining": -5.0}
    assert ControllerState.from_json(data).pin == StoredPin(60, -5.0)
    data["pin"] = None
    assert ControllerState.from_json(data).pin is None


def kept() -> Kept:
    drain = DrainLatch(holding=True, polls_since_release=4)
    return Kept(
        level=123.4,
        bootstrapped=True,
        turnover=17.5,
        drain=drain,
        pin=Pin(60, 142.0),
        cuts=2,
        trims=3,
    )


def test_save_and_resume_carry_the_state_across_clocks() -> None:
    stored = json.loads(json.dumps(save(ReferencePolicy(), kept(), now=100.0)))
    back, note = resume(ControllerConfig(), ReferencePolicy(), stored, now=5000.0)
    assert (back.level, back.bootstrapped, back.turnover, note) == (123.4, True, 17.5, "")
    assert (back.drain.holding, back.drain.polls_since_release) == (True, 4)
    assert back.pin == Pin(60, 5042.0)  # 42 s were left, on the new clock


def test_a_controller_saved_before_its_first_poll_bootstraps_after_the_restore() -> None:
    config = ControllerConfig()
    stored = json.loads(json.dumps(Controller(config, ReferencePolicy()).to_json(now=5.0)))
    restored, _ = Controller.restore(config, ReferencePolicy(), stored, now=0.0)
    (boot,) = restored.on_poll([sample(capacity=40_000, max_model_len=4_000)], inflight=0, now=1.0)
    assert (boot.kind, restored.cap) == (DecisionKind.BOOTSTRAP, 10)


def test_resume_brings_the_level_and_the_pin_inside_new_bounds_and_says_so() -> None:
    stored = save(ReferencePolicy(), kept(), now=100.0)
    back, note = resume(ControllerConfig(max_inflight=50), ReferencePolicy(), stored, now=0.0)
    assert (back.level, back.pin) == (50.0, Pin(50, 42.0))
    assert note == " (stored level 123.4 out of bounds; stored pin cap 60 out of bounds)"


def test_resume_refuses_another_policys_state_and_malformed_policy_state() -> None:
    stored = save(ReferencePolicy(), kept(), now=100.0)
    with pytest.raises(ValueError, match="stored state is policy 'reference', not 'pacer'"):
        resume(ControllerConfig(), PacerPolicy(), stored, now=0.0)
    stored["policy_state"] = {"overload": {"queue_streak": 0, "waiting": []}}
    with pytest.raises(ValueError, match="stored policy state lacks field 'polls_since_trim'"):
        resume(ControllerConfig(), ReferencePolicy(), stored, now=0.0)
    stored["policy_state"]["polls_since_trim"] = -4
    with pytest.raises(ValueError, match="stored policy state is malformed: polls_since_trim"):
        resume(ControllerConfig(), ReferencePolicy(), stored, now=0.0)


def test_a_refused_policy_state_leaves_the_policy_as_it_was() -> None:
    """Policies load field by field; the knee here loads before the bad field is met."""
    cut = PacerPolicy()
    cut.load_json({**PacerPolicy().to_json(), "knee": 100.0})
    stored = save(cut, kept(), now=100.0)
    stored["policy_state"]["polls_since_trim"] = -1
    policy = PacerPolicy()
    fresh = policy.to_json()
    with pytest.raises(ValueError, match="polls_since_trim"):
        resume(ControllerConfig(), policy, stored, now=0.0)
    assert policy.to_json() == fresh


def test_a_lapsed_pin_is_kept_until_the_next_input_reports_it() -> None:
    lapsed = Kept(10.0, True, 0.0, DrainLatch(), Pin(8, 90.0), cuts=0, trims=0)
    back, _ = resume(
        ControllerConfig(), ReferencePolicy(), save(ReferencePolicy(), lapsed, now=100.0), now=0.0
    )
    assert back.pin == Pin(8, 0.0)


def restarted(ctl: Controller, now: float) -> Controller:
    stored = json.loads(json.dumps(ctl.to_json(now=now)))
    back, _ = Controller.restore(ctl.config, ReferencePolicy(), stored, now=now)
    return back


def test_a_restart_inside_a_stuck_drain_keeps_its_count_of_hard_polls_at_the_cap() -> None:
    """Two hard polls at the cut cap, a restart, one more: the escape's third poll, not its
    first, so each restart does not buy the engines more polls of preemptions."""
    ctl = Controller(ControllerConfig(initial_inflight=100), ReferencePolicy())
    preempt = [sample(preemptions=3)]
    ctl.on_poll(preempt, inflight=100, now=1.0)  # cut to 80
    ctl.on_poll(preempt, inflight=80, now=2.0)
    ctl.on_poll(preempt, inflight=80, now=3.0)
    back = restarted(ctl, now=3.5)
    (release,) = back.on_poll(preempt, inflight=80, now=4.0)
    assert release.kind is DecisionKind.DRAIN_RELEASE
    assert "for 3 polls" in release.reason


def test_a_restart_keeps_the_counts_of_cuts_trims_and_suppressed_cuts() -> None:
    ctl = Controller(ControllerConfig(initial_inflight=100), ReferencePolicy())
    ctl.on_poll([sample(kv=0.85)], inflight=100, now=1.0)  # trim to 82
    ctl.on_poll([sample(preemptions=1)], inflight=82, now=2.0)  # cut
    ctl.on_poll([sample(preemptions=1)], inflight=82, now=3.0)  # suppressed
    before = ctl.make_stats(3.0)
    after = restarted(ctl, now=3.0).make_stats(3.0)
    assert (after.cuts, after.trims, after.suppressed_cuts) == (1, 1, 1)
    assert (after.cuts, after.trims, after.suppressed_cuts) == (
        before.cuts,
        before.trims,
        before.suppressed_cuts,
    )


def test_a_stored_number_too_large_for_a_float_is_refused_and_the_policy_is_untouched() -> None:
    """A JSON integer like 10**400 overflows float(); it must be a ValueError naming the field,
    raised after nothing was loaded (the queue streak loads before the knee)."""
    policy = PacerPolicy()
    stored = save(policy, kept(), now=0.0)
    stored["policy_state"]["overload"]["queue_streak"] = 2
    stored["policy_state"]["knee"] = 10**400
    untouched = PacerPolicy().to_json()
    with pytest.raises(ValueError, match="knee must be a finite number"):
        Controller.restore(ControllerConfig(), policy, stored, now=0.0)
    assert policy.to_json() == untouched
