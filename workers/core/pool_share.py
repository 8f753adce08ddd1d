"""A run's part in the pool of engines it shares, wherever the claims are exchanged.

At every arbitration the run states its claim, built from its orchestrator and controller
as they are now, hands it to an injected ``exchange`` (the runtime's goes through the
database so that runs on different workers see each other; the virtual benchmark's is a
dict), computes its own share of what comes back with the rule every run uses
(``workers.core.sharing``) and gives the ceiling to its controller. One class for both, so
the benchmark measures the claims and ceilings the runtime states and applies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from workers.core.clock import Clock
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import ObserveOnly
from workers.core.decisions import Cause, Decision, DecisionKind, Signal
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.sharing import Claim, Share, arbitrate

# Writes this run's claim and returns every live claim of the runs exchanging, its own included.
Exchange = Callable[[Claim], Awaitable[list[Claim]]]


class ShareTaker:
    """Builds the run's claim, exchanges it, and applies the run's ceiling as decisions."""

    def __init__(
        self,
        *,
        run_id: int,
        weight: float,
        priority: int,
        max_inflight: int,
        controller: Controller | ObserveOnly,
        orchestrator: Orchestrator,
        engine_urls: Callable[[], frozenset[str]],
        exchange: Exchange,
        clock: Clock,
    ) -> None:
        self.run_id = run_id
        self._weight = weight
        self._priority = priority
        self._max_inflight = max_inflight
        self._controller = controller
        self._orchestrator = orchestrator
        self._engine_urls = engine_urls  # the run's engines now: they join and leave
        self._exchange = exchange
        self._clock = clock
        self._capacity: int | None = None
        self._runs: tuple[int, ...] = ()  # the runs in the pool at the last share taken
        self._members: frozenset[int] = frozenset()  # the runs in the pool at the last look

    def claim(self) -> Claim:
        """What the run states now: its demand is its max_inflight while hungry (the
        orchestrator keeps only a group beyond its cap queued, so its queue says nothing),
        else its cap."""
        dispatcher = self._orchestrator.loop.dispatcher
        stats = self._controller.make_stats(self._clock.now())
        return Claim(
            run_id=self.run_id,
            engines=self._engine_urls(),
            weight=self._weight,
            priority=self._priority,
            demand=self._max_inflight if self._orchestrator.hungry else dispatcher.cap,
            inflight=dispatcher.inflight,
            loaded=stats.signal is not Signal.CLEAR,
            ceiling=self._controller.ceiling,
            capacity=self._capacity,
            queued=stats.engine_waiting,
            overloaded=stats.signal is Signal.HARD,
        )

    async def arbitrate(self) -> Share | None:
        """One arbitration: the claim exchanged, the ceiling given to the controller (a
        change is a ``share`` decision, commanded through the run's control loop)."""
        found = await self._exchange(self.claim())
        share = arbitrate(self.run_id, found)
        members = frozenset(() if share is None else share.runs)
        if self._members - members:
            self._controller.neighbour_left()
        self._members = members
        if share is None:
            self._controller.set_neighbours(0)
        else:
            self._controller.set_neighbours(share.others, over=share.others_over)
        before = self._controller.ceiling
        ceiling = None if share is None else share.ceiling
        decisions = self._controller.set_ceiling(
            ceiling, now=self._clock.now(), detail=self._detail(share, before, ceiling, found)
        )
        self._capacity = None if share is None else share.capacity
        if decisions:
            self._runs = () if share is None else share.runs
        for decision in decisions:
            self._orchestrator.loop.command(decision)
        return share

    def set_terms(self, weight: float | None, priority: int | None) -> Decision:
        """An operator's new share and/or priority: stated from the next look on, where the
        pool is split anew. The decision (``share``, the cap as it is) is the caller's to
        apply, once linked to its command."""
        before = f"share {self._weight:g}, priority {self._priority}"
        if weight is not None:
            self._weight = weight
        if priority is not None:
            self._priority = priority
        now, cap = self._clock.now(), self._controller.cap
        return Decision(
            at=now,
            kind=DecisionKind.SHARE,
            cause=Cause.OPERATOR,
            signal=self._controller.make_stats(now).signal,
            cap_before=cap,
            cap_after=cap,
            reason=f"{before} -> share {self._weight:g}, priority {self._priority}: the "
            "pool is split anew at the next look",
            figures={"share": self._weight, "priority": self._priority},
        )

    def _detail(
        self, share: Share | None, before: int | None, after: int | None, found: list[Claim]
    ) -> str:
        change = f"ceiling {_said(before)} -> {_said(after)}"
        if share is None:
            return f"no other run shares its engines: {change}"
        others = [c for c in found if c.run_id in share.runs and c.run_id != self.run_id]
        joined = [c.run_id for c in others if c.run_id not in self._runs]
        left = [run for run in self._runs if run not in share.runs]
        engines = ", ".join(sorted(_host(url) for url in self._engine_urls()))
        weights = ", ".join(f"run {c.run_id} x{c.weight:g} p{c.priority}" for c in others)
        news = "".join(
            [
                f"run {', '.join(map(str, joined))} joined; " if joined and self._runs else "",
                f"run {', '.join(map(str, left))} left; " if left else "",
            ]
        )
        return (
            f"{news}pool {engines} with {weights} (this run x{self._weight:g} "
            f"p{self._priority}), capacity {share.capacity}: {change}"
        )


def _said(ceiling: int | None) -> str:
    return "none" if ceiling is None else str(ceiling)


def _host(url: str) -> str:
    return urlsplit(url).netloc or url
