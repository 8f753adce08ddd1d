"""Decision records: JSON round trip, validation, reason sentences."""

from __future__ import annotations

import json

import pytest

from workers.core.decisions import Cause, Decision, DecisionKind, Signal, change_reason


def decision(**overrides: object) -> Decision:
    fields: dict[str, object] = dict(
        at=12.5,
        kind=DecisionKind.CUT,
        cause=Cause.PREEMPTION,
        signal=Signal.HARD,
        cap_before=500,
        cap_after=400,
        reason="Decreased concurrency 500 -> 400 (preemption)",
        shed=100,
        figures={"inflight": 500, "max_kv_usage": 0.93},
    )
    fields.update(overrides)
    return Decision(**fields)  # type: ignore[arg-type]


def test_a_decision_survives_json() -> None:
    original = decision(shadow_before=500, shadow_after=400, alert=True)
    assert Decision.from_json(json.loads(json.dumps(original.to_json()))) == original


def test_figures_are_read_only() -> None:
    with pytest.raises(TypeError):
        decision().figures["inflight"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"cap_after": -1}, "caps"), ({"shed": -3}, "shed")],
)
def test_impossible_numbers_are_refused(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        decision(**overrides)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("kind"), "lacks field 'kind'"),
        (lambda d: d.update(kind="explode"), "malformed"),
        (lambda d: d.update(figures={"x": "many"}), "malformed"),
    ],
)
def test_malformed_json_is_refused_with_the_field_named(mutate, message) -> None:
    data = decision().to_json()
    mutate(data)
    with pytest.raises(ValueError, match=message):
        Decision.from_json(data)


@pytest.mark.parametrize(
    ("before", "after", "text"),
    [
        (500, 400, "Decreased concurrency 500 -> 400 (preemption): inflight 500 x 0.8"),
        (100, 125, "Increased concurrency 100 -> 125 (preemption): inflight 500 x 0.8"),
        (80, 80, "Concurrency stays 80 (preemption): inflight 500 x 0.8"),
    ],
)
def test_reason_sentences_read_like_the_reference_log(before, after, text) -> None:
    assert change_reason(before, after, Cause.PREEMPTION, "inflight 500 x 0.8") == text
