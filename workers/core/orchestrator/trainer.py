"""Waiting for the trainer: a step's acknowledgement within the run's timeout, on its clock,
unless the run is stopped first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from workers.core.clock import Clock
from workers.core.orchestrator.ports import Ack, Acknowledgements


class RunFailed(Exception):
    """The run cannot go on; the message is the reason shown to operators."""


async def acknowledged(
    acks: Acknowledgements,
    step: int,
    *,
    timeout: float,
    clock: Clock,
    stopped: Callable[[], Awaitable[None]],
    current_version: int,
) -> Ack | None:
    """The trainer's acknowledgement of ``step``; None when ``stopped`` returned first.
    RunFailed when the timeout passes first, or the version went backwards."""
    ack = asyncio.ensure_future(acks.wait(step))
    stop = asyncio.ensure_future(stopped())
    expiry = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait({ack, stop, expiry}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in (stop, expiry):
            waiter.cancel()
        if not ack.done():
            ack.cancel()
    if not ack.done():
        if stop.done():
            return None
        raise RunFailed(f"the trainer did not acknowledge step {step} within {timeout:g} s")
    result = ack.result()
    if result.version < current_version:
        raise RunFailed(
            f"the trainer acknowledged step {step} with policy version {result.version}, "
            f"behind the current {current_version}"
        )
    return result
