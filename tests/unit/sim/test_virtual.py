"""The virtual clock: steps back to back, jumps idle time, returns at each finish."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim.sampling import SamplingParams
from inference.sim.virtual import VirtualEngine
from tests.unit.sim.helpers import make_engine


def test_an_idle_engine_jumps_to_the_arrival_and_to_the_horizon() -> None:
    virtual = VirtualEngine(make_engine())
    assert virtual.run_until(5.0) == [] and virtual.now == 5.0
    req = virtual.submit("a", np.arange(10), SamplingParams(max_tokens=2), at=7.0)
    assert virtual.now == 7.0
    assert virtual.run_until(100.0) == [req]
    assert req.finish_time == pytest.approx(7.0 + 0.02 + 0.011)  # prefill, then one decode
    assert virtual.now == req.finish_time and virtual.num_steps == 2


def test_run_until_returns_at_the_first_step_that_finishes_something() -> None:
    virtual = VirtualEngine(make_engine())
    short = virtual.submit("short", np.arange(4), SamplingParams(max_tokens=2), at=0.0)
    long = virtual.submit("long", np.arange(20, 24), SamplingParams(max_tokens=9), at=0.0)
    assert virtual.run_until(100.0) == [short]
    follow_up = virtual.submit("next", np.arange(40, 44), SamplingParams(max_tokens=1), virtual.now)
    finished = virtual.run_until(100.0)
    assert finished == [follow_up]  # admitted in the very next step
    assert virtual.run_until(100.0) == [long]


def test_the_virtual_past_cannot_change() -> None:
    virtual = VirtualEngine(make_engine())
    virtual.submit("a", np.arange(4), SamplingParams(max_tokens=30), at=0.0)
    virtual.run_until(0.1)
    with pytest.raises(ValueError, match="before the step in progress"):
        virtual.submit("late", np.arange(4), SamplingParams(max_tokens=1), at=0.01)
