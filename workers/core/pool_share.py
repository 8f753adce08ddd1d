"""A run's part in the pool of engines it shares, wherever the claims are exchanged.

At every look the run states its claim, built from its orchestrator and controller as they
are now, hands it to an injected ``exchange`` (the runtime's goes through the database so that
runs on different workers see each other; the virtual benchmark's is a dict), computes its own
part of what comes back with the rule every run uses (``workers.core.sharing``) and gives it to
its controller. One class for both, so the benchmark measures the claims and parts the runtime
states and applies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from workers.core.clock import Clock
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import ObserveOnly
from workers.core.controller.pool_part import PoolPart
from workers.core.decisions import Cause, Decision, DecisionKind
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.sharing import Claim, Share, arbitrate

# Writes this run's claim and returns every live claim of the runs exchanging, its own
# included, each stamped with when the exchange first saw its run's current host (``since``).
Exchange = Callable[[Claim], Awaitable[list[Claim]]]


class ShareTaker:
    """Builds the run's claim, exchanges it, and gives the run's part to its controller."""

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
        renew_s: float,
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
        self.renew_s = renew_s  # how often its host looks, and so renews the claim
        self._last: Share | None = None  # the part taken at the last look
        # Each other run's (since, completed, inflight) in the pool at the last look.
        self._seen: dict[int, tuple[float, int, int]] = {}
        # Slots other runs freed for this one that it had no room under its cap for yet (its
        # cap follows their claims a look late): taken over at the next looks while it
        # displaces them.
        self._owed = 0

    def claim(self) -> Claim:
        """What the run states now (see ``demand``)."""
        controller = self._controller
        return Claim(
            run_id=self.run_id,
            engines=self._engine_urls(),
            weight=self._weight,
            priority=self._priority,
            demand=self.demand(),
            inflight=self._orchestrator.loop.dispatcher.inflight,
            max_inflight=self._max_inflight,
            level=controller.level,
            renew_s=self.renew_s,
            ceiling=controller.ceiling,
            footprint=self._orchestrator.footprint.tokens,
            completed=controller.completed,
        )

    def demand(self) -> int:
        """Episodes the run has to run now: its ``max_inflight`` while it would take more;
        what it holds while its trainer holds it back or it is stopping (the rest of its part
        is lent); its cap while an operator's pin holds it there."""
        if self._controller.make_stats(self._clock.now()).pinned_for is not None:
            return self._controller.cap
        if self._orchestrator.hungry:
            return self._max_inflight
        return max(1, self._orchestrator.loop.dispatcher.inflight)

    async def arbitrate(self) -> Share | None:
        """One look: the claim exchanged, the run's part given to its controller (a change is
        a ``share`` decision, commanded through the run's control loop). The slots the runs
        that left the pool held, and those a run of lower priority freed while this one
        displaces it, are this run's to take over (``Dispatcher.take_over``)."""
        found = await self._exchange(self.claim())
        share = arbitrate(self.run_id, found)
        part = None
        if share is not None:
            part = PoolPart(
                fraction=share.fraction,
                leads=share.leader == self.run_id,
                level=share.level,
                most=share.most,
                others_inflight=share.others_inflight,
                others_may_hold=share.others_may_hold,
                held_back=share.held_back,
                counted=share.counted,
                terms=tuple(
                    (c.run_id, c.weight, c.priority)
                    for c in sorted(found, key=lambda c: c.run_id)
                    if c.run_id in share.runs
                ),
            )
        detail = self._detail(share, found)
        now = self._clock.now()
        decisions = self._controller.share(part, now=now, detail=detail)
        others = [] if share is None else [c for c in found if c.run_id in share.runs[1:]]
        completed, left = self._newly_completed(others), self._left_holding(others)
        if share is not None:
            decisions += self._controller.others_completed(completed, now=now)
        for decision in decisions:
            self._orchestrator.loop.command(decision)
        displacing = share is not None and share.displacing
        self._owed = (self._owed + completed if displacing else 0) + left
        self._owed -= self._orchestrator.loop.dispatcher.take_over(self._owed)
        self._last = share
        self._seen = {c.run_id: (c.since, c.completed, c.inflight) for c in others}
        return share

    def _newly_completed(self, others: Iterable[Claim]) -> int:
        """Episodes the other runs completed since their last claims this run saw; nothing
        for a run first seen, or under a new host (its count starts again)."""
        newly = 0
        for claim in others:
            since, completed, _ = self._seen.get(claim.run_id, (claim.since, claim.completed, 0))
            if since == claim.since:
                newly += max(0, claim.completed - completed)
        return newly

    def _left_holding(self, others: Iterable[Claim]) -> int:
        """Episodes the runs that left the pool since the last look held by their last claims:
        their slots are the pool's again, and the runs staying take them over."""
        staying = {c.run_id for c in others}
        return sum(inflight for run, (_, _, inflight) in self._seen.items() if run not in staying)

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

    def _detail(self, share: Share | None, found: list[Claim]) -> str:
        """What changed in the pool since the last look, and who sizes it."""
        last = self._last
        if share is None:
            return "no other run shares its engines"
        others = [c for c in found if c.run_id in share.runs and c.run_id != self.run_id]
        before = () if last is None else last.runs
        joined = [c for c in others if c.run_id not in before]
        left = [run for run in before if run not in share.runs and run != self.run_id]
        engines = ", ".join(sorted(_host(url) for url in self._engine_urls()))
        arrived = ", ".join(str(c.run_id) for c in joined)
        late = ", ".join(str(c.run_id) for c in others if c.overdue)
        news = "".join(
            [
                f"run {arrived} joined; " if joined and last else "",
                f"run {', '.join(map(str, left))} left; " if left else "",
                f"run {late} overdue (its host may be dead: no growth); " if late else "",
            ]
        )
        weights = ", ".join(f"run {c.run_id} x{c.weight:g} p{c.priority}" for c in others)
        level = f"{share.level:.0f}"
        if (
            last is not None
            and last.leader == share.leader
            and round(last.level) != round(share.level)
        ):
            level = f"{last.level:.0f} -> {level}"
        sizer = "this run" if share.leader == self.run_id else f"run {share.leader}"
        return (
            f"{news}pool {engines} with {weights} (this run x{self._weight:g} "
            f"p{self._priority}); the pool's level {level}, sized by {sizer}"
        )


def _host(url: str) -> str:
    return urlsplit(url).netloc or url
