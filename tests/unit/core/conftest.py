"""Fixtures of the core's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.core.dispatch_harness import Harness, MakeHarness
from tests.unit.core.loop_harness import LoopHarness, MakeLoop
from workers.core.control_loop import Steering


@pytest.fixture
async def make() -> AsyncIterator[MakeHarness]:
    """Harnesses whose dispatchers are closed after the test, pacing timers included."""
    made: list[Harness] = []

    def factory(*args: Any, **kwargs: Any) -> Harness:
        made.append(Harness(*args, **kwargs))
        return made[-1]

    yield factory
    for harness in made:
        await harness.dispatcher.aclose()


@pytest.fixture
async def make_loop() -> AsyncIterator[MakeLoop]:
    """Running loops, closed after the test whatever it did."""
    made: list[LoopHarness] = []

    async def factory(controller: Steering, **kwargs: Any) -> LoopHarness:
        harness = LoopHarness(controller, **kwargs)
        await harness.loop.__aenter__()
        await harness.settle()
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        await harness.loop.aclose()
