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
    original = decision(shadow_before=500, shadow_after=400, alert=True, engine="sim-engine-1")
    assert Decision.from_json(json.loads(json.dumps(original.to_json()))) == original


def test_a_decision_stored_before_decisions_named_engines_reads_as_the_runs_own() -> None:
    data = decision().to_json()
    del data["engine"]
    assert Decision.from_json(data).engine == ""


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
        (lambda d: d.update(alert="false"), "alert must be true or false"),
        (lambda d: d.update(applied=1), "applied must be true or false"),
        (lambda d: d.update(cap_before=99.9), "cap_before must be an integer"),
        (lambda d: d.update(cap_after=float("inf")), "cap_after must be an integer"),
        (lambda d: d.update(shed="3"), "shed must be an integer"),
        (lambda d: d.update(shadow_after=2.5), "shadow_after must be an integer"),
        (lambda d: d.update(at=10**400), "at must be a finite number"),
        (lambda d: d.update(figures={"x": 10**400}), "figures"),
        (lambda d: d.update(figures=[1]), "figures must be an object"),
        (lambda d: d.update(reason=7), "reason must be a string"),
        (lambda d: d.update(engine=None), "engine must be a string"),
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
