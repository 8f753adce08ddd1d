"""The dispatcher: admits episodes under the cap, routes groups, sheds and drops them.

It owns the permits, the in-flight counts and the episodes' asyncio tasks; the controller only
gives it a cap and, now and then, a number of episodes to shed. Lowering the cap never cancels
anything by itself: it only stops admission until completions bring the pool under it.

The caller injects how an episode runs (an async callable given the episode and its engine;
the HTTP rollout lives there), which engines are healthy, and the clock. Cancelling an
episode's task raises CancelledError inside that callable, which closes its HTTP request, and
vLLM aborts a request whose client disconnects, freeing its KV.

Routing also asks the engines' breakers (``breaker.py``): an engine whose episodes keep
failing gets no new group until a probe after its backoff, so one failing fast (and so always
the least loaded) cannot take every group. Each engine taken out or brought back goes to
``on_engine``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine, Iterable
from functools import partial
from typing import Any, Generic

from workers.core.clock import Clock
from workers.core.dispatch.breaker import EngineBreakers, EngineChange
from workers.core.dispatch.episodes import (
    CancelReason,
    EpisodeTicket,
    FinishedEpisode,
    GroupSpec,
    P,
    R,
)
from workers.core.dispatch.groups import Group, GroupQueue, LiveEpisode
from workers.core.dispatch.pacing import AdmissionPacer
from workers.core.dispatch.permits import EpisodeKind, PermitLedger, PermitOutcome
from workers.core.dispatch.records import DispatcherConfig, DispatcherStats, ShedReport
from workers.core.dispatch.tallies import Tallies

RunEpisode = Callable[[EpisodeTicket[P], str], Coroutine[Any, Any, R]]
OnFinished = Callable[[FinishedEpisode[P, R]], None]
OnEngine = Callable[[EngineChange], None]


class Dispatcher(Generic[P, R]):
    """Runs episodes under a cap, with pacing, group routing, shedding and off-policy drops.

    Every method is called from inside the running event loop: admissions create tasks at once.
    """

    def __init__(
        self,
        *,
        run_episode: RunEpisode[P, R],
        on_finished: OnFinished[P, R],
        clock: Clock,
        cap: int,
        config: DispatcherConfig | None = None,
        engines: Iterable[str] = (),
        on_engine: OnEngine | None = None,
    ) -> None:
        self.config = config or DispatcherConfig()
        self._run_episode = run_episode
        self._on_finished = on_finished
        self._on_engine = on_engine
        self._clock = clock
        self._cap = _checked_cap(cap)
        self._healthy: tuple[str, ...] = tuple(engines)
        self.breakers = EngineBreakers(self._healthy, self.config.breaker, now=clock.now())
        self._held: set[str] = set()  # engines taking no new group: their weights are updating
        self._ledger = PermitLedger()
        self._pacer = AdmissionPacer(self.config.pacing)
        self._tallies = Tallies()
        self._queue = GroupQueue()
        self._policy_version = 0
        self._timer: asyncio.Task[None] | None = None
        self._timer_at = math.inf  # when the pending timer wakes
        self._closed = False

    @property
    def inflight(self) -> int:
        return self._ledger.inflight

    @property
    def cap(self) -> int:
        return self._cap

    @property
    def pending(self) -> int:
        """Episodes submitted and not yet admitted."""
        return self._queue.pending_episodes

    @property
    def demand(self) -> int:
        """The pool after one pacing window's admissions of the queued work, under the cap:
        pacing spreads a rising cap's new slots over its window, and meanwhile the pool is
        short of the cap for want of admissions, not of work."""
        inflight = self._ledger.inflight
        next_group = self._queue.next()
        size = next_group.spec.size if next_group is not None else 1
        window = min(self._queue.pending_episodes, self._pacer.budget(self._cap, size))
        return max(inflight, min(self._cap, inflight + window))

    # -- inputs from the runtime -----------------------------------------------------------

    def submit(self, spec: GroupSpec[P]) -> bool:
        """Queue a group; False when it is already too far behind the policy to be worth it."""
        if self._closed:
            raise RuntimeError("dispatcher is closed; no group can be submitted")
        if spec.group_id in self._queue:
            raise ValueError(f"group {spec.group_id!r} is already queued or running")
        _running_loop()
        if self._too_old(spec):
            return False
        self._queue.add(spec)
        self._refill()
        return True

    def set_cap(self, cap: int) -> None:
        """A new cap: a higher one admits more now; a lower one only stops admission."""
        checked = _checked_cap(cap)
        _running_loop()
        self._cap = checked
        self._refill()

    def take_over(self, count: int) -> int:
        """Up to ``count`` slots other runs sharing the engines freed for this one: filling
        them replaces what the engines held, not a wall of new prefills, so they are credited
        as completions are. Returns how many the room under the cap took now."""
        if count < 0:
            raise ValueError(f"take_over count must be >= 0, got {count}")
        taken = max(0, min(count, self._room - self._pacer.credits))
        if taken:
            self._pacer.refund(taken)
            self._refill()
        return taken

    def hold(self, engine: str) -> None:
        """No new group goes to ``engine`` (its weights are being updated) until ``release``;
        groups already on it keep it, so a group's episodes stay on one engine."""
        self._held.add(engine)

    def release(self, engine: str) -> None:
        self._held.discard(engine)
        self._refill()

    def set_engines(self, healthy: Iterable[str]) -> None:
        """The engines new groups may go to; groups on an engine that left are re-routed."""
        engines = tuple(healthy)
        _running_loop()
        self._healthy = engines
        self.breakers.observe(engines, self._clock.now())
        self._refill()

    def shed(self, count: int) -> ShedReport:
        """Cancel whole train groups, youngest first, until ``count`` live episodes are cut.

        At most one group more than needed is touched, so at most ``count`` + that group's
        size - 1 episodes are cancelled. Eval groups are never shed (``GroupQueue.victims``).
        """
        if count < 0:
            raise ValueError(f"shed count must be >= 0, got {count}")
        cancelled, groups = 0, []
        for group in self._queue.victims():
            if cancelled >= count:
                break
            cancelled += self._close(group, CancelReason.SHED)
            groups.append(group.spec.group_id)
        return ShedReport(tuple(groups), cancelled)

    def evict(self, engine: str) -> int:
        """Cancel every group with an episode live on ``engine`` (an engine leaving the run,
        past its drain deadline); how many live episodes were cancelled."""
        on_engine = [
            group
            for group in self._queue.groups()
            if any(live.permit.engine_id == engine for live in group.live.values())
        ]
        return sum(self._close(group, CancelReason.ENGINE_LEFT) for group in on_engine)

    def forget(self, engine: str) -> None:
        """``engine`` left the run: its breaker goes with it."""
        self.breakers.forget(engine, self._clock.now())

    def drop(self, group_id: str) -> int:
        """Cancel what is left of a group whose result is lost already (a member failed);
        how many live episodes were cancelled. An unknown or ended group is no error."""
        group = self._queue.get(group_id)
        return 0 if group is None or group.closed else self._close(group, CancelReason.DROPPED)

    def advance_policy(self, version: int) -> tuple[str, ...]:
        """A new policy version: drop train groups more than max_off_policy_steps behind it.

        Eval groups stay: an evaluation of an older checkpoint still measures that checkpoint.
        """
        if version < self._policy_version:
            raise ValueError(f"policy version went back from {self._policy_version} to {version}")
        self._policy_version = version
        stale = self._queue.open_where(self._too_old)
        for group in stale:
            self._close(group, CancelReason.OFF_POLICY)
        return tuple(g.spec.group_id for g in stale)

    def stats(self) -> DispatcherStats:
        now = self._clock.now()
        next_group = self._queue.next()
        group_size = next_group.spec.size if next_group is not None else 1
        return DispatcherStats(
            at=now,
            cap=self._cap,
            inflight=self._ledger.inflight,
            inflight_train=self._ledger.inflight_of(EpisodeKind.TRAIN),
            inflight_eval=self._ledger.inflight_of(EpisodeKind.EVAL),
            pending_episodes=self._queue.pending_episodes,
            open_groups=len(self._queue),
            pacing_paid=self._pacer.paid(now),
            pacing_credits=self._pacer.credits,
            pacing_budget=self._pacer.budget(self._cap, group_size),
            healthy_engines=len(self._healthy),
            inflight_by_engine=self._ledger.engines(),
            train_by_engine=self._ledger.train_engines(),
            policy_version=self._policy_version,
            tallies=self._tallies.snapshot(),
        )

    async def aclose(self) -> None:
        """Cancel every episode and the pacing timer, wait for them all to end, and refuse new
        work. An episode already cancelled (shed, off-policy) keeps that reason."""
        self._closed = True
        groups = self._queue.groups()
        tasks = [live.task for g in groups for live in g.live.values() if live.task]
        if self._timer is not None:
            self._timer.cancel()
            tasks.append(self._timer)
        for group in groups:
            self._close(group, CancelReason.CLOSED)
        # Each task's own done callback was added before gather's, so it has released the
        # permit by the time gather returns.
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> Dispatcher[P, R]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- admission -------------------------------------------------------------------------

    @property
    def _room(self) -> int:
        """Free slots under the cap now (negative while a cut drains the pool)."""
        return self._cap - self._ledger.inflight

    def _refill(self) -> None:
        """Admit as many episodes as the cap, the pacing window and the queue allow, at once."""
        self._pacer.fit(self._room)
        if self._closed or not self._healthy:
            return
        now = self._clock.now()
        while (room := self._room) > 0:
            group = self._queue.next()
            if group is None:
                return
            allowed = self._pacer.available(now, self._cap, group.spec.size)
            if allowed <= 0:
                self._arm_timer(self._pacer.next_expiry())
                return
            if not self._start(group, min(room, allowed, group.remaining), now):
                self._arm_timer(self.breakers.next_probe_at())
                return

    def _start(self, group: Group, count: int, now: float) -> bool:
        """Admit ``count`` episodes of ``group`` on its engine (routing it first if it has
        none, or one that left); False when no engine takes a new group now."""
        spec = group.spec
        loop = _running_loop()
        engine = group.engine_id
        if engine is None or engine not in self._healthy or not self.breakers.keeps(engine):
            engine = self._route(now)
            if engine is None:
                return False
            group.engine_id = engine
        for index in self._queue.admit(group, count):
            ticket = EpisodeTicket(
                spec.group_id, index, spec.kind, spec.env, spec.policy_version, spec.payloads[index]
            )
            live = LiveEpisode(ticket, self._ledger.issue(spec.kind, engine, now), now)
            group.live[index] = live
            live.task = loop.create_task(self._episode(ticket, engine))
            live.task.add_done_callback(partial(self._finish, group, live))
            self._tallies.admitted(spec.kind, spec.env, engine)
        self._pacer.admit(now, count)
        return True

    def _route(self, now: float) -> str | None:
        """The engine a new group goes to: the routable one with the fewest episodes in flight
        (an engine out of routing whose backoff passed has none, so it gets its probe)."""
        routable = [
            e for e in self._healthy if e not in self._held and self.breakers.takes_new(e, now)
        ]
        if not routable:
            return None
        engine = min(routable, key=self._ledger.inflight_on)
        self.breakers.routed(engine, now)
        return engine

    async def _episode(self, ticket: EpisodeTicket[P], engine: str) -> R:
        """The episode's own task. Calling the run-episode callable inside it means that one
        that raises at once (not a coroutine function, or a bad payload) fails this episode
        like any other error, through ``_finish``, instead of escaping mid-admission with a
        permit issued and no task to return it."""
        return await self._run_episode(ticket, engine)

    def _arm_timer(self, wake_at: float | None) -> None:
        """Refill at ``wake_at`` (a pacing window's expiry, an engine's probe), unless a timer
        wakes sooner already: each wake-up refills, and arms the next timer it needs."""
        if wake_at is None:
            return
        if self._timer is not None and not self._timer.done():
            if self._timer_at <= wake_at:
                return
            self._timer.cancel()
        self._timer_at = wake_at
        self._timer = asyncio.get_running_loop().create_task(self._wake(wake_at))

    async def _wake(self, at: float) -> None:
        await self._clock.sleep(max(0.0, at - self._clock.now()))
        self._timer, self._timer_at = None, math.inf
        self._refill()

    # -- endings ---------------------------------------------------------------------------

    def _finish(self, group: Group, live: LiveEpisode, task: asyncio.Task[Any]) -> None:
        """Done callback, not a ``finally``: a task cancelled before its first step never runs
        its body, and its permit must come back all the same."""
        now = self._clock.now()
        pool = self._ledger.inflight
        result, error, reason = None, None, live.cancel_reason
        if reason is not None or task.cancelled():
            outcome = PermitOutcome.CANCELLED
            reason = reason or CancelReason.CLOSED
        elif (error := task.exception()) is not None:
            outcome = PermitOutcome.FAILED
        else:
            outcome = PermitOutcome.COMPLETED
            result = task.result()
            self._pacer.refund()  # kept only while its slot is under the cap (``_refill``)
        live.permit.release(outcome)
        self._judge(live, outcome, error, now)
        ticket = live.ticket
        self._tallies.ended(ticket.kind, ticket.env, live.permit.engine_id, outcome, reason)
        self._queue.ended(group, ticket.index)
        finished = FinishedEpisode(
            ticket,
            live.permit.engine_id,
            outcome,
            live.started_at,
            now,
            pool,
            result,
            error,
            reason,
        )
        try:
            self._on_finished(finished)
        finally:
            self._refill()

    def _judge(
        self, live: LiveEpisode, outcome: PermitOutcome, error: BaseException | None, now: float
    ) -> None:
        """Feed the engine's breaker with how its episode ended (a cancellation says nothing
        about the engine), and pass on a change of its standing."""
        engine = live.permit.engine_id
        if outcome is PermitOutcome.COMPLETED:
            change = self.breakers.succeeded(engine, now)
        elif outcome is PermitOutcome.FAILED:
            text = str(error) or type(error).__name__
            change = self.breakers.failed(engine, started_at=live.started_at, now=now, error=text)
        else:
            return
        if change is not None and self._on_engine is not None:
            self._on_engine(change)

    def _close(self, group: Group, reason: CancelReason) -> int:
        """Close a group: no more admissions, its live episodes cancelled (an episode already
        cancelled keeps its first reason). Returns how many were cancelled now."""
        cancelled = 0
        for live in group.live.values():
            if live.cancel_reason is None and live.task is not None and live.task.cancel():
                live.cancel_reason = reason
                cancelled += 1
        self._queue.close(group)
        return cancelled

    def _too_old(self, spec: GroupSpec[Any]) -> bool:
        return (
            spec.kind is EpisodeKind.TRAIN
            and self._policy_version - spec.policy_version > self.config.max_off_policy_steps
        )


def _running_loop() -> asyncio.AbstractEventLoop:
    """Admission creates tasks at once, so it needs the running loop; checked before any change
    so that a call from outside it loses nothing."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "the dispatcher admits episodes as tasks: call it from inside a running event loop"
        ) from None


def _checked_cap(cap: int) -> int:
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ValueError(f"cap must be an integer >= 0, got {cap!r}")
    return cap
