"""The operator's pin and the checks on command input."""

from __future__ import annotations

import math

import pytest

from workers.core.controller.overrides import Overrides, Pin


def test_a_pin_lapses_at_its_deadline() -> None:
    overrides = Overrides(1, 100)
    overrides.hold(40, 10.0, now=5.0)
    assert overrides.lapse(14.9) is None
    assert overrides.seconds_left(14.0) == pytest.approx(1.0)
    assert overrides.lapse(15.0) == Pin(40, 15.0)
    assert (overrides.pin, overrides.seconds_left(15.0)) == (None, None)


def test_a_pin_is_due_from_its_deadline_and_asking_changes_nothing() -> None:
    overrides = Overrides(1, 100)
    assert not overrides.due(0.0)
    overrides.hold(40, 10.0, now=0.0)
    assert (overrides.due(9.9), overrides.due(10.0), overrides.due(10.0)) == (False, True, True)
    assert overrides.pin == Pin(40, 10.0)


def test_drop_returns_what_was_held() -> None:
    overrides = Overrides(1, 100)
    assert overrides.drop() is None
    overrides.hold(40, 10.0, now=0.0)
    assert overrides.drop() == Pin(40, 10.0)


@pytest.mark.parametrize(
    ("cap", "ttl", "message"),
    [
        (0, 1.0, "cap must be"),
        (101, 1.0, "cap must be"),
        (True, 1.0, "cap must be"),
        (5, 0.0, "ttl"),
        (5, math.nan, "ttl"),
        (5, math.inf, "ttl"),
        (5, "60", "ttl"),
        (5, None, "ttl"),
        (5, 10**400, "ttl"),
        (5, True, "ttl"),
    ],
)
def test_bad_commands_are_refused_and_keep_the_current_pin(cap, ttl, message) -> None:
    overrides = Overrides(1, 100)
    overrides.hold(40, 10.0, now=0.0)
    with pytest.raises(ValueError, match=message):
        overrides.hold(cap, ttl, now=1.0)
    assert overrides.pin == Pin(40, 10.0)
