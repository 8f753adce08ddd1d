"""The controller's stored state: JSON shape and its validation."""

from __future__ import annotations

import json

import pytest

from workers.core.control_state import ControllerState, StoredPin


def state() -> ControllerState:
    return ControllerState(
        policy="reference",
        level=123.4,
        bootstrapped=True,
        draining=True,
        polls_since_release=3,
        turnover=17.5,
        pin=StoredPin(cap=60, remaining=42.0),
        policy_state={"polls_since_trim": 2},
    )


def test_state_survives_json() -> None:
    assert ControllerState.from_json(json.loads(json.dumps(state().to_json()))) == state()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format=2), "format"),
        (lambda d: d.pop("turnover"), "lacks field 'turnover'"),
        (lambda d: d.update(level=float("nan")), "finite"),
        (lambda d: d.update(level=0), "finite"),
        (lambda d: d.update(pin={"cap": "x", "remaining": 1}), "malformed"),
        (lambda d: d.update(policy_state=[1, 2]), "malformed"),
    ],
)
def test_state_that_cannot_be_trusted_is_refused(mutate, message) -> None:
    data = state().to_json()
    mutate(data)
    with pytest.raises(ValueError, match=message):
        ControllerState.from_json(data)
