"""The cut and the trim hysteresis shared by the adaptive policies."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.policies.base import PoolView
from workers.core.controller.policies.pacer import PacerConfig
from workers.core.controller.policies.reductions import TrimRest, cut_proposal
from workers.core.controller.policies.reference import ReferenceConfig
from workers.core.controller.policies.signals import OverloadTracker
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind

QUEUED = PollSummary.from_samples([sample(running=100, waiting=80, waiting_capacity=80)], 0.0)
PREEMPTED = PollSummary.from_samples([sample(preemptions=1)], 0.0)


def view(since_release: int | None = None) -> PoolView:
    return PoolView(level=200.0, inflight=200, polls_since_release=since_release, turnover=0.0)


@pytest.mark.parametrize(
    ("settings", "poll", "since", "level", "cause", "escalated"),
    [
        (ReferenceConfig(), PREEMPTED, None, 160.0, Cause.PREEMPTION, False),
        (ReferenceConfig(), PREEMPTED, 6, 100.0, Cause.PREEMPTION, True),
        (ReferenceConfig(), PREEMPTED, 7, 160.0, Cause.PREEMPTION, False),
        (PacerConfig(), PREEMPTED, None, 170.0, Cause.PREEMPTION, False),
        (PacerConfig(), PREEMPTED, 1, 200 * 0.85**3, Cause.PREEMPTION, True),
    ],
)
def test_cut_factor_by_cause_and_escalation(settings, poll, since, level, cause, escalated) -> None:
    tracker = OverloadTracker(queue_ratio=0.5, queue_polls=1)
    cut = cut_proposal(tracker.update(poll), view(since), settings, tracker)
    assert (cut.kind, cut.cause, cut.shed) == (DecisionKind.CUT, cause, True)
    assert cut.level == pytest.approx(level)
    assert ("(escalated)" in cut.detail) is escalated


def test_a_queue_overload_cut_spends_the_streak_behind_it() -> None:
    tracker = OverloadTracker(queue_ratio=0.5, queue_polls=2)
    tracker.update(QUEUED)
    overload = tracker.update(QUEUED)
    cut = cut_proposal(overload, view(), ReferenceConfig(), tracker)
    assert (cut.cause, cut.level) == (Cause.QUEUE_OVERLOAD, pytest.approx(180.0))
    assert tracker.update(QUEUED).queue_streak == 1


def test_trims_rest_for_the_given_number_of_polls() -> None:
    rest = TrimRest(3)
    assert rest.rested
    rest.tick()  # polls before the first trim do not count
    rest.trimmed()
    rested = []
    for _ in range(4):
        rest.tick()
        rested.append(rest.rested)
    assert rested == [False, False, True, True]
