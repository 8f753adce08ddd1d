"""Decision records: the figures every record carries, pinned records, merged growth."""

from __future__ import annotations

from tests.unit.core.builders import sample
from workers.core.controller.decision_records import GrowthLog, Moment
from workers.core.controller.policies.base import PoolView
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal


def moment(policy_cap: int = 80, pin_cap: int | None = None) -> Moment:
    poll = PollSummary.from_samples([sample(kv=0.4, preemptions=2)], 1.0)
    reading = ReferencePolicy().read(poll, PoolView(100.0, 100, None, 3.5))
    return Moment(
        at=7.0,
        reading=reading,
        inflight=100,
        turnover=3.5,
        growth=1.0,
        policy_cap=policy_cap,
        pin_cap=pin_cap,
    )


def test_a_policy_record_speaks_of_the_policy_cap_and_carries_the_figures() -> None:
    cut = moment().policy_record(DecisionKind.CUT, Cause.PREEMPTION, "x0.8", before=100, shed=20)
    assert (cut.at, cut.signal, cut.cap_before, cut.cap_after, cut.shed) == (
        7.0,
        Signal.HARD,
        100,
        80,
        20,
    )
    assert cut.reason == "Decreased concurrency 100 -> 80 (preemption): x0.8"
    assert (cut.shadow_before, cut.shadow_after) == (None, None)
    assert {k: cut.figures[k] for k in ("inflight", "turnover", "preemptions")} == {
        "inflight": 100,
        "turnover": 3.5,
        "preemptions": 2,
    }


def test_while_pinned_the_caps_are_the_pins_and_the_shadow_the_policys() -> None:
    cut = moment(pin_cap=120).policy_record(DecisionKind.CUT, Cause.PREEMPTION, "", before=100)
    assert (cut.cap_before, cut.cap_after, cut.shadow_before, cut.shadow_after) == (
        120,
        120,
        100,
        80,
    )
    assert cut.reason.startswith("Pinned at 120 by operator; policy: Decreased concurrency")


def test_a_record_without_a_reading_has_an_unknown_signal() -> None:
    blank = Moment(1.0, None, 5, 0.0, 1.0, 10, None)
    record = blank.record(DecisionKind.STALE_FREEZE, Cause.STALE, 10, "no metrics", alert=True)
    assert (record.signal, record.alert, dict(record.figures)) == (
        Signal.UNKNOWN,
        True,
        {"inflight": 5, "turnover": 0.0, "growth": 1.0},
    )


def test_growth_is_recorded_at_once_then_merged_until_the_next_interval() -> None:
    log = GrowthLog()
    assert log.grew(100)  # the interval's first step: on record at once
    (first,) = log.record(moment(policy_cap=101))
    assert (first.kind, first.cap_before, first.cap_after) == (DecisionKind.GROW, 100, 101)
    assert not log.grew(101)  # later steps wait
    assert not log.grew(102)
    log.new_interval()
    (merged,) = log.record(moment(policy_cap=125))  # the poll records them as one...
    assert (merged.cap_before, merged.cap_after) == (101, 125)
    assert not log.grew(125)  # ...and that was this interval's record
    assert log.take() == 125
    assert log.take() is None
    assert log.record(moment(policy_cap=130)) == ()


def test_growth_that_was_undone_makes_no_record() -> None:
    log = GrowthLog()
    log.grew(80)
    log.take()
    log.grew(80)
    assert log.record(moment(policy_cap=80)) == ()
