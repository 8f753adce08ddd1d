"""The command listener against the real Redis: cancelled at any moment of its start (the
connection's handshake, the subscription, the first wait), it stops at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from django.conf import settings

from workers.core.clock import MonotonicClock
from workers.runtime.commands import Commands

pytestmark = pytest.mark.integration

# Cancelled this many times, 1 ms further into its start each time: the listener's start
# (connect, handshake, subscribe) takes a few ms on loopback, so the sweep covers all of it.
CANCEL_POINTS = 40
STOPPED_WITHIN_S = 1.0  # a host waits BACKGROUND_STOP_S (10 s) for a helper that does not stop


async def no_commands(function: Any, *args: Any, **kwargs: Any) -> list[Any]:
    """The database thread's answer: nothing pending, after a database call's few ms."""
    await asyncio.sleep(0.002)
    return []


async def test_the_listener_stops_when_cancelled_at_any_moment_of_its_start() -> None:
    late: dict[int, float] = {}
    for point in range(CANCEL_POINTS):
        commands = Commands(
            run_id=10**9 + point,  # a channel nobody publishes on
            owner="test-host",
            controller=None,  # type: ignore[arg-type]
            orchestrator=None,  # type: ignore[arg-type]
            reporter=None,  # type: ignore[arg-type]
            engines=None,  # type: ignore[arg-type]
            sharing=None,  # type: ignore[arg-type]
            call=no_commands,
            clock=MonotonicClock(),
            redis_url=settings.REDIS_URL,
            live=dict,
        )
        listener = asyncio.ensure_future(commands.run())
        await asyncio.sleep(point / 1000)
        listener.cancel()
        cancelled_at = time.monotonic()
        _, stuck = await asyncio.wait([listener], timeout=STOPPED_WITHIN_S)
        if stuck:
            late[point] = time.monotonic() - cancelled_at
            listener.cancel()
            await asyncio.wait([listener], timeout=STOPPED_WITHIN_S)
    print(f"\ncancelled at {CANCEL_POINTS} points of its start; still running after: {late}")
    assert not late, f"cancelled {{ms into its start: s waited}}: {late}"
