"""The reference policy (prime-rl's measured AIMD): growth multiplier, trim and cut rules."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.policies.base import PoolView
from workers.core.controller.policies.reference import ReferenceConfig, ReferencePolicy
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal


def pool(level: float = 100.0, inflight: int = 100, since_release: int | None = None) -> PoolView:
    return PoolView(level=level, inflight=inflight, polls_since_release=since_release, turnover=0.0)


def step(policy: ReferencePolicy, view: PoolView, **fields: object):
    reading = policy.read(PollSummary.from_samples([sample(**fields)], 0.0), view)  # type: ignore[arg-type]
    return reading, policy.propose(reading, view)


def test_a_clear_poll_allows_growth_of_1_25_per_turnover() -> None:
    reading, proposal = step(ReferencePolicy(), pool())
    assert (reading.signal, reading.growth, proposal) == (Signal.CLEAR, 1.25, None)


@pytest.mark.parametrize(("usage", "growth"), [(0.0, 1.20), (0.4, 1.10), (0.8, 1.0), (0.95, 1.0)])
def test_kv_taper_option_runs_growth_from_1_20_at_empty_to_1_00_at_0_8(usage, growth) -> None:
    assert ReferenceConfig(kv_taper=True).multiplier(usage) == pytest.approx(growth)


def test_without_the_taper_growth_ignores_kv_usage() -> None:
    assert ReferenceConfig().multiplier(0.55) == 1.25


def test_trim_between_0_8_and_0_9_is_proportional_and_sheds_nothing() -> None:
    reading, proposal = step(ReferencePolicy(), pool(), kv=0.85)
    assert reading.signal is Signal.SOFT
    assert proposal is not None
    assert (proposal.kind, proposal.cause, proposal.shed) == (
        DecisionKind.TRIM,
        Cause.KV_PRESSURE,
        False,
    )
    assert proposal.level == pytest.approx(100 * 0.7 / 0.85)


def test_trim_above_0_9_also_sheds_the_excess() -> None:
    _, proposal = step(ReferencePolicy(), pool(), kv=0.95)
    assert proposal is not None
    assert proposal.shed
    assert proposal.level == pytest.approx(100 * 0.7 / 0.95)


def test_no_second_trim_within_6_polls_of_the_first() -> None:
    policy = ReferencePolicy()
    assert step(policy, pool(), kv=0.85)[1] is not None
    for _ in range(5):
        assert step(policy, pool(level=82.0, inflight=100), kv=0.95)[1] is None
    assert step(policy, pool(level=82.0, inflight=100), kv=0.95)[1] is not None


def test_no_trim_when_the_cap_is_already_below_the_trim_level() -> None:
    _, proposal = step(ReferencePolicy(), pool(level=50.0), kv=0.85)
    assert proposal is None


@pytest.mark.parametrize(
    ("fields", "since", "factor", "cause"),
    [
        ({"preemptions": 1}, None, 0.8, Cause.PREEMPTION),
        ({"preemptions": 1}, 6, 0.5, Cause.PREEMPTION),
        ({"preemptions": 1}, 7, 0.8, Cause.PREEMPTION),
    ],
)
def test_cut_factors(fields, since, factor, cause) -> None:
    _, proposal = step(ReferencePolicy(), pool(since_release=since), **fields)
    assert proposal is not None
    assert (proposal.kind, proposal.cause, proposal.shed) == (DecisionKind.CUT, cause, True)
    assert proposal.level == pytest.approx(100 * factor)


def test_queue_overload_cut_is_0_9_and_forgets_the_streak() -> None:
    policy = ReferencePolicy()
    queued = {"running": 100, "waiting": 80, "waiting_capacity": 80}
    for _ in range(5):
        assert step(policy, pool(), **queued)[1] is None
    reading, proposal = step(policy, pool(), **queued)
    assert reading.signal is Signal.HARD
    assert proposal is not None
    assert (proposal.cause, proposal.level) == (Cause.QUEUE_OVERLOAD, pytest.approx(90.0))
    assert step(policy, pool(), **queued)[0].signal is not Signal.HARD


def test_config_rejects_values_outside_their_range() -> None:
    with pytest.raises(ValueError, match=r"preemption_factor must be in \[0.01, 1.0\]"):
        ReferenceConfig(preemption_factor=1.5)
    with pytest.raises(ValueError, match="trim_target_usage"):
        ReferenceConfig(trim_target_usage=0.85)


def test_state_round_trips() -> None:
    policy = ReferencePolicy()
    step(policy, pool(), kv=0.85)
    copy = ReferencePolicy()
    copy.load_json(policy.to_json())
    assert step(copy, pool(), kv=0.95) == step(policy, pool(), kv=0.95)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("polls_since_trim", -1, "polls_since_trim must be an integer >= 0"),
        ("polls_since_trim", "3", "polls_since_trim must be an integer >= 0"),
        ("overload", {"queue_streak": 1.5, "waiting": []}, "queue_streak must be an integer"),
        ("overload", {"queue_streak": 1, "waiting": "e0"}, "waiting must be a list"),
    ],
)
def test_stored_state_of_the_wrong_type_is_refused(field, value, message) -> None:
    data = ReferencePolicy().to_json()
    data[field] = value
    with pytest.raises(ValueError, match=message):
        ReferencePolicy().load_json(data)
