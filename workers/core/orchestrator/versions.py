"""Keeping a run's record of what each engine serves true between weight updates.

The relay knows what it pushed; an engine that restarted, or came back up, may have lost it
and serve its base weights again. The watch reads every poll for that (a restart, a return
from down), takes such an engine out of routing until its version is read back, and reads
all versions back every ``WEIGHTS_CHECK_S`` anyway, for a restart no poll caught; the relay's
check pushes the current checkpoint again to an engine that lost it. It also tells the
controller which engines are paused for an update, and for ``UPDATE_SETTLE_POLLS`` polls after
(``LoadSample.updating``): a paused engine is neither stale nor idle, and its cold cache is
no eviction.

Plain asyncio over the relay, the dispatcher's routing and an injected clock, so it runs in a
worker, a test and virtual time alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence

from workers.core.clock import Clock
from workers.core.decisions import Decision
from workers.core.orchestrator.relay import (
    UPDATE_SETTLE_POLLS,
    WEIGHTS_CHECK_S,
    EngineWeights,
    Relay,
    Routing,
)
from workers.core.samples import EngineHealth, LoadSample

logger = logging.getLogger(__name__)


class VersionWatch:
    """The run's relay and the watch over what its engines serve: an engine joins and leaves
    both at once."""

    def __init__(
        self,
        relay: Relay,
        *,
        engines: Sequence[str],
        routing: Routing,
        clock: Clock,
        on_decisions: Callable[[tuple[Decision, ...]], None],
    ) -> None:
        self._relay = relay
        self._engines = tuple(engines)
        self._routing = routing
        self._clock = clock
        self._on_decisions = on_decisions
        self._check_now = asyncio.Event()  # a poll saw an engine restart: check versions
        self._health: dict[str, EngineHealth] = {}  # each engine's health at the last poll
        self._settling: dict[str, int] = {}  # polls left to mark after each engine's resume
        self._resumes_seen: dict[str, float] = {}
        self._held_for_check: set[str] = set()  # engines out of routing until checked

    @property
    def relay(self) -> Relay:
        return self._relay

    def by_engine(self) -> dict[str, tuple[int | None, bool]]:
        """Each engine's served version on the relay's record (None until the run knows it)
        and whether it is updating now."""
        relay = self._relay
        return {e: (relay.served.get(e), e in relay.updating) for e in self._engines}

    def add(self, engine: str, weights: EngineWeights) -> None:
        """An engine joined the run (held out of routing by the caller): checked at once, and
        routed once its version is read back (and, if need be, pushed)."""
        self._relay.add(engine, weights)
        self._engines = (*self._engines, engine)
        self._held_for_check.add(engine)
        self._check_now.set()

    def remove(self, engine: str) -> None:
        self._relay.remove(engine)
        self._engines = tuple(e for e in self._engines if e != engine)
        self._health.pop(engine, None)
        self._settling.pop(engine, None)
        self._resumes_seen.pop(engine, None)

    def served(self, engine: str, dispatched: int) -> int:
        """The version ``engine`` serves on the relay's record; ``dispatched`` (the version
        its group was dispatched under) while no weights were relayed to it, when only the
        trainer's word says what it serves."""
        return self._relay.served.get(engine, dispatched)

    def mark(self, samples: Sequence[LoadSample]) -> list[LoadSample]:
        """A poll's samples with engines paused for an update (or just resumed from one)
        marked ``updating``; an engine that restarted or came back up gets its version
        checked now."""
        relay = self._relay
        for name, at in relay.resumed_at.items():
            if self._resumes_seen.get(name) != at:
                self._resumes_seen[name] = at
                self._settling[name] = UPDATE_SETTLE_POLLS
        marked = {
            name
            for name in self._engines
            if name in relay.updating or self._settling.get(name, 0) > 0
        }
        for name in marked - relay.updating:
            self._settling[name] -= 1
        for sample in samples:
            before = self._health.get(sample.endpoint)
            self._health[sample.endpoint] = sample.health
            if sample.restarted or (
                before is EngineHealth.DOWN and sample.health is EngineHealth.UP
            ):
                self._suspect(sample.endpoint)
        return [
            dataclasses.replace(s, updating=True) if s.endpoint in marked else s for s in samples
        ]

    async def watch(self) -> None:
        """Read the engines' versions back every ``WEIGHTS_CHECK_S``, or at once when a poll
        saw a restart, and bring back an engine that lost the current weights; until
        cancelled."""
        self._check_now.set()  # at the start too: a new host finds the engines as they are
        while True:
            await self._check_due()
            self._check_now.clear()
            held, self._held_for_check = self._held_for_check, set()
            try:
                decisions = await self._relay.check()
            except Exception:  # a check that failed is tried again at the next one
                logger.exception("orchestrator: the engines' versions could not be checked")
                decisions = ()
            finally:
                for engine in held:
                    self._routing.release(engine)
            if decisions:
                self._on_decisions(decisions)

    def _suspect(self, engine: str) -> None:
        """An engine that restarted, or came back up, may be on its base weights: on record
        as such until a check reads its version (a turn is never tagged newer than it may
        be), and out of routing until then, so no new group samples from weights it lost."""
        relay = self._relay
        if engine not in relay.served or engine in relay.updating:
            return  # no version of the run's was ever pushed to it: nothing to lose
        relay.suspect(engine)
        self._routing.hold(engine)
        self._held_for_check.add(engine)
        self._check_now.set()

    async def _check_due(self) -> None:
        """Until a poll asks for a check, or ``WEIGHTS_CHECK_S`` on the run's clock."""
        asked = asyncio.ensure_future(self._check_now.wait())
        timer = asyncio.ensure_future(self._clock.sleep(WEIGHTS_CHECK_S))
        try:
            await asyncio.wait((asked, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            asked.cancel()
            timer.cancel()
