"""Checks name the field and the valid range; stored values are read strictly."""

from __future__ import annotations

import re

import pytest

from workers.core.validation import (
    check_cap,
    check_range,
    stored_bool,
    stored_count,
    stored_number,
    stored_optional_count,
    stored_optional_number,
)


def test_values_inside_the_range_pass_including_the_ends() -> None:
    check_range("x", 0.0, 0.0, 1.0)
    check_range("x", 1.0, 0.0, 1.0)


@pytest.mark.parametrize("value", [-0.1, 1.1, float("nan")])
def test_values_outside_the_range_are_refused_with_field_and_range(value: float) -> None:
    with pytest.raises(ValueError, match=r"^window must be in \[0.0, 1.0\], got "):
        check_range("window", value, 0.0, 1.0)


@pytest.mark.parametrize("value", ["0.5", None, True, [0.5]])
def test_a_value_that_is_not_a_number_is_refused_with_a_value_error(value: object) -> None:
    """Configs come from TOML and JSON: a string where a number belongs must be a field
    error, never a TypeError out of the comparison."""
    with pytest.raises(ValueError, match=r"^window must be a number in \[0.0, 1.0\], got "):
        check_range("window", value, 0.0, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [2.5, 3.0, "3"])
def test_a_count_must_be_an_integer(value: object) -> None:
    with pytest.raises(ValueError, match=r"^polls must be an integer in \[1, 10\], got "):
        check_range("polls", value, 1, 10)  # type: ignore[arg-type]


def test_an_integer_too_large_for_a_float_is_out_of_range_not_an_overflow() -> None:
    with pytest.raises(ValueError, match=r"^window must be in \[0.0, 1.0\]"):
        check_range("window", 10**400, 0.0, 1.0)


@pytest.mark.parametrize("cap", [0, 11, 5.0, True, "5", None])
def test_a_cap_must_be_an_integer_within_the_bounds(cap: object) -> None:
    with pytest.raises(ValueError, match=r"^pin cap must be an integer in \[1, 10\], got "):
        check_cap(cap, 1, 10, "pin cap")


def test_a_cap_within_the_bounds_passes_through() -> None:
    assert (check_cap(1, 1, 10), check_cap(10, 1, 10)) == (1, 10)


@pytest.mark.parametrize(
    ("read", "data", "message"),
    [
        (stored_bool, {"x": "false"}, "x must be true or false, got 'false'"),
        (stored_bool, {"x": 0}, "x must be true or false, got 0"),
        (stored_count, {"x": -1}, "x must be an integer >= 0, got -1"),
        (stored_count, {"x": 2.0}, "x must be an integer >= 0, got 2.0"),
        (stored_count, {"x": False}, "x must be an integer >= 0, got False"),
        (stored_optional_count, {"x": "3"}, "x must be an integer >= 0, got '3'"),
        (stored_number, {"x": float("nan")}, "x must be a finite number, got nan"),
        (stored_number, {"x": "1.5"}, "x must be a finite number, got '1.5'"),
        (stored_optional_number, {"x": True}, "x must be a finite number, got True"),
    ],
)
def test_stored_values_of_the_wrong_type_are_refused_not_coerced(read, data, message) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        read(data, "x")


def test_stored_values_of_the_right_type_are_read() -> None:
    data = {"b": False, "n": 3, "none": None, "f": 2, "neg": -1.5}
    assert (stored_bool(data, "b"), stored_count(data, "n")) == (False, 3)
    assert (stored_optional_count(data, "none"), stored_optional_number(data, "none")) == (
        None,
        None,
    )
    assert (stored_number(data, "f"), stored_number(data, "neg")) == (2.0, -1.5)
    with pytest.raises(ValueError, match="neg must be a finite number >= 0"):
        stored_number(data, "neg", low=0.0)
    with pytest.raises(KeyError):
        stored_bool(data, "missing")
