"""A hosted run's part in the pool of engines it shares, its claims exchanged through the
database.

At every poll period (``LOOK_MAX_S`` at most) the host's ``ShareTaker``
(``workers.core.pool_share``) writes its run's claim and reads every fresh claim back
(``workers.runtime.claims``), computes its own run's part with the same rule every other host
uses and gives it to the controller. The database being away only delays this; the part in
force stays meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from workers.core.clock import Clock
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import ObserveOnly
from workers.core.decisions import Decision
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.pool_share import ShareTaker
from workers.core.sharing import LOOK_MAX_S, Claim
from workers.runtime import claims

logger = logging.getLogger(__name__)

Call = Callable[..., Awaitable[Any]]


class PoolShare:
    def __init__(
        self,
        *,
        run_id: int,
        owner: str,
        weight: float,
        priority: int,
        max_inflight: int,
        controller: Controller | ObserveOnly,
        orchestrator: Orchestrator,
        engine_urls: Callable[[], frozenset[str]],
        call: Call,
        clock: Clock,
        period_s: float,
    ) -> None:
        self.run_id = run_id
        self._owner = owner
        self._call = call
        self.period_s = min(period_s, LOOK_MAX_S)  # how often it looks, and renews its claim
        self.taker = ShareTaker(
            run_id=run_id,
            weight=weight,
            priority=priority,
            max_inflight=max_inflight,
            controller=controller,
            orchestrator=orchestrator,
            engine_urls=engine_urls,
            exchange=self._exchange,
            clock=clock,
            renew_s=self.period_s,
        )

    async def run(self) -> None:
        while True:
            try:
                await self.arbitrate()
            except Exception:  # the host's tenure deals with a lost lease
                logger.warning("sharing: pool claims unreachable for now", exc_info=True)
            await asyncio.sleep(self.period_s)

    async def arbitrate(self) -> None:
        await self.taker.arbitrate()

    def set_terms(self, weight: float | None, priority: int | None) -> Decision:
        return self.taker.set_terms(weight, priority)

    async def _exchange(self, claim: Claim) -> list[Claim]:
        """The claim written under this host's name, the fresh ones read."""
        found: list[Claim] = await self._call(claims.exchange, self.run_id, self._owner, claim)
        return found
