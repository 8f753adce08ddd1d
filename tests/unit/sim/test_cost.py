"""Step time grows with batched tokens, sequences, context read and prefill attention."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim.cost import StepCost, chunk_pairs
from inference.sim.engine import Engine
from inference.sim.sampling import SamplingParams
from tests.unit.sim.helpers import make_config


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


def test_a_prefill_chunk_attends_everything_before_each_of_its_tokens() -> None:
    # Chunks of 4 after 10 computed (4 x 10 + 1 + 2 + 3 + 4), 1 after 7 (decode: none), 3 at 0.
    pairs = chunk_pairs(np.array([4, 1, 3]), np.array([10, 7, 0]))
    assert pairs == 4 * 10 + 10 + (1 + 2 + 3)
    assert chunk_pairs(np.array([1, 1]), np.array([500, 900])) == 0


def test_recomputing_a_context_costs_quadratically_with_the_attention_term() -> None:
    """The token term alone makes a 20k-token recompute ten times a 2k one; attention makes it
    dearer than that, which is what a preemption of a long context costs on a real engine."""
    cost = StepCost(0.0, 3e-5, 0.0, 0.0, per_attention_pair_s=1e-9)

    def prefill(length: int) -> float:
        return cost.step_time(length, 1, length, chunk_pairs(np.array([length]), np.array([0])))

    assert prefill(20_000) / prefill(2_000) > 12  # 10 without it
    assert prefill(20_000) == pytest.approx(20_000 * 3e-5 + 20_000 * 20_001 / 2 * 1e-9)


def test_a_step_with_a_long_chunk_lasts_its_attention_too() -> None:
    """Through the engine: the scheduler counts the pairs of the prefill it schedules."""
    cost = StepCost(0.01, 0.001, 0.0, 0.0, per_attention_pair_s=1e-4)
    engine = Engine(make_config(), cost)
    engine.add_request("a", np.arange(10), SamplingParams(max_tokens=2), now=0.0)
    first = engine.step(0.0)
    assert first.end == pytest.approx(0.01 + 10 * 0.001 + 55 * 1e-4)
    second = engine.step(first.end)
    assert second.end - first.end == pytest.approx(0.011)  # a decode token: no pairs
