"""Range checks name the field and the valid range."""

from __future__ import annotations

import pytest

from workers.core.validation import check_range


def test_values_inside_the_range_pass_including_the_ends() -> None:
    check_range("x", 0.0, 0.0, 1.0)
    check_range("x", 1.0, 0.0, 1.0)


@pytest.mark.parametrize("value", [-0.1, 1.1, float("nan")])
def test_values_outside_the_range_are_refused_with_field_and_range(value: float) -> None:
    with pytest.raises(ValueError, match=r"^window must be in \[0.0, 1.0\], got "):
        check_range("window", value, 0.0, 1.0)
