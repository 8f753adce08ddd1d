"""Step time grows with batched tokens, sequences and context read."""

from __future__ import annotations

import pytest

from inference.sim.cost import StepCost


def test_step_time_is_overhead_plus_each_term() -> None:
    cost = StepCost(0.005, 1e-4, 1e-3, 1e-6)
    assert cost.step_time(0, 0, 0) == pytest.approx(0.005)
    assert cost.step_time(100, 4, 10_000) == pytest.approx(0.005 + 0.01 + 0.004 + 0.01)
    assert cost.step_time(8, 8, 20_000) > cost.step_time(8, 8, 10_000)


def test_negative_or_all_zero_coefficients_are_refused() -> None:
    with pytest.raises(ValueError, match="per_seq_s must be >= 0"):
        StepCost(0.005, 1e-4, -1.0, 0.0)
    with pytest.raises(ValueError, match="steps take time"):
        StepCost(0.0, 0.0, 1e-3, 0.0)
