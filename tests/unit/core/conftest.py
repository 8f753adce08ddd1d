"""Fixtures of the core's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.core.dispatch_harness import Harness, MakeHarness


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
