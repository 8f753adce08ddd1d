"""The control loop: engine polls and episode completions drive the controller, and the
controller's cap and sheds drive the dispatcher.

This is the runtime's inner loop with its I/O injected: ``poll`` returns one load sample per
engine (the engine monitor in production, a script in tests), ``run_episode`` runs one episode
on an engine (the rollout client), and the clock says when to poll. Every ``poll_period`` it
polls, hands the samples and the in-flight count to the controller, and applies the result:
the cap in force goes to the dispatcher, a decision's shed cancels that many episodes,
youngest groups first, and an engine whose every rank is down gets no new groups until a
poll finds it again. An engine whose episodes keep failing is taken out of routing by the
dispatcher's breakers, and each such change is recorded as a decision (``engine-out``, an
alert the first time; ``engine-back``); once no engine has been usable for the breakers'
``give_up_s``, the loop says so to ``on_failed`` (the orchestrator then fails the run with that
reason), once. Every episode that ends on its own (completed or failed) goes to the
controller, which may grow the cap at once. Episodes the dispatcher cancelled are not fed: a
shed episode says nothing about what the engines can carry. An episode whose result says it
failed ends as a failure (``EpisodeFailed``), exactly as if it had raised.

A poll that raises, or samples the controller rejects, are logged and skipped; the loop keeps
its period. The controller itself turns missing polls into a growth freeze once its poll TTL
passes, so a broken monitor can never make the pool look clear.

    async with ControlLoop(controller=ctl, poll=poll, run_episode=run, clock=clock,
                           engines=["engine-0"]) as loop:
        loop.dispatcher.submit(group)
        ...
    # leaving the block cancels every episode (aborting its requests) and returns its permit
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from workers.core.clock import Clock
from workers.core.controller.records import ControllerStats, EpisodeCompletion
from workers.core.decisions import Cause, Decision, DecisionKind
from workers.core.dispatch.breaker import ChangeKind, EngineChange
from workers.core.dispatch.dispatcher import Dispatcher, OnFinished, RunEpisode
from workers.core.dispatch.episodes import EpisodeTicket, FinishedEpisode, P
from workers.core.dispatch.permits import PermitOutcome
from workers.core.dispatch.records import DispatcherConfig
from workers.core.members import Leaving, Left, PoolMembers
from workers.core.samples import EngineHealth, LoadSample
from workers.core.validation import check_range

logger = logging.getLogger(__name__)

Poll = Callable[[], Awaitable[Sequence[LoadSample]]]
# Called after every controller input the loop applied, with its decisions (often none): the
# cap may have moved even so, as growth is recorded at most once per poll.
OnDecisions = Callable[[tuple[Decision, ...]], None]
# Called once with the reason when the run cannot go on: no engine usable for too long.
OnFailed = Callable[[str], None]
# Called when an engine taken out of the run has drained: nothing of the run is on it now.
OnLeft = Callable[[str], None]


class EpisodeResult(Protocol):
    """What the loop reads from an episode's result: the rollout client's TurnResult fits."""

    @property
    def tokens(self) -> int: ...

    @property
    def ok(self) -> bool: ...


R = TypeVar("R", bound=EpisodeResult)


class EpisodeFailed(Exception):
    """An episode returned a result that says it failed; ``result`` is that result.

    Raised so that the dispatcher counts the episode failed. Counted as a completion, it would
    refund a pacing credit, and an engine that refuses every request at once would burn
    through the whole queue of groups in no time.
    """

    def __init__(self, result: EpisodeResult) -> None:
        super().__init__("the episode's result says it failed")
        self.result = result


class Steering(Protocol):
    """The controller as the loop drives it; ``Controller`` and ``ObserveOnly`` both fit."""

    @property
    def cap(self) -> int: ...

    def on_poll(
        self, samples: Sequence[LoadSample], *, inflight: int, now: float
    ) -> tuple[Decision, ...]: ...

    def on_completion(
        self, completion: EpisodeCompletion, *, now: float
    ) -> tuple[Decision, ...]: ...

    def make_stats(self, now: float) -> ControllerStats: ...

    def set_pool(self, engines: Iterable[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class LoopConfig:
    poll_period: float = 5.0  # prime-rl polls the engines about every 5 s
    decision_log_size: int = 10_000  # recent decisions kept in memory for the run's views

    def __post_init__(self) -> None:
        if not math.isfinite(self.poll_period):
            raise ValueError(f"poll_period must be finite, got {self.poll_period}")
        check_range("poll_period", self.poll_period, 0.001, 3600.0)
        check_range("decision_log_size", self.decision_log_size, 1, 10_000_000)


class LoopState(StrEnum):
    NEW = "new"  # built: the dispatcher takes groups, nothing runs until entered
    RUNNING = "running"  # polling; episodes admitted under the controller's cap
    CLOSED = "closed"  # stopped: no task left, every permit returned


class ControlLoop(Generic[P, R]):
    """Owns the dispatcher and the poll task; entered once, closed once."""

    def __init__(
        self,
        *,
        controller: Steering,
        poll: Poll,
        run_episode: RunEpisode[P, R],
        clock: Clock,
        engines: Iterable[str],
        config: LoopConfig | None = None,
        dispatcher_config: DispatcherConfig | None = None,
        on_finished: OnFinished[P, R] | None = None,
        on_decisions: OnDecisions | None = None,
        on_failed: OnFailed | None = None,
        on_left: OnLeft | None = None,
    ) -> None:
        self.config = config or LoopConfig()
        self._controller = controller
        self._poll = poll
        self._clock = clock
        self._on_finished = on_finished
        self._on_decisions = on_decisions
        self._on_failed = on_failed
        self._on_left = on_left
        self.failure: str | None = None  # why the run cannot go on, once it cannot
        self._log: deque[Decision] = deque(maxlen=self.config.decision_log_size)
        self._members = PoolMembers(engines)
        self._down: frozenset[str] = frozenset()
        self._state = LoopState.NEW
        self._task: asyncio.Task[None] | None = None
        self.polls = 0  # polls the controller took
        self.failed_polls = 0  # polls that raised or whose samples the controller rejected
        self.dispatcher: Dispatcher[P, R] = Dispatcher(
            run_episode=_failing_on_error(run_episode),
            on_finished=self._finished,
            clock=clock,
            cap=0,  # nothing runs before the loop does
            config=dispatcher_config,
            engines=self._members.engines,
            on_engine=self._engine_changed,
        )

    @property
    def state(self) -> LoopState:
        return self._state

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """The most recent decisions, oldest first, at most ``decision_log_size``."""
        return tuple(self._log)

    async def __aenter__(self) -> ControlLoop[P, R]:
        if self._state is not LoopState.NEW:
            raise RuntimeError(f"control loop is {self._state.value}; it can be entered once")
        self._state = LoopState.RUNNING
        self.dispatcher.set_cap(self._controller.cap)
        self._task = asyncio.get_running_loop().create_task(self._poll_forever())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop polling, cancel every episode and wait until each has returned its permit.

        Closing is marked first, so a second call returns at once; the dispatcher is closed in a
        ``finally``, so a cancellation that hits this call mid-way cannot leave episodes running
        (the dispatcher cancels them all before its first await).
        """
        if self._state is LoopState.CLOSED:
            return
        self._state = LoopState.CLOSED
        try:
            if self._task is not None:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        finally:
            await self.dispatcher.aclose()

    async def _poll_forever(self) -> None:
        """Polls start one period apart; after a poll that overran its period, the next starts
        at once, and the missed ones are not made up (a burst would shorten every streak the
        policies count in polls)."""
        while True:
            started = self._clock.now()
            await self._poll_once()
            self._check_engines()
            await self._clock.sleep(max(0.0, started + self.config.poll_period - self._clock.now()))

    async def _poll_once(self) -> None:
        """One poll; whatever fails in it is logged and the loop keeps its period, because a
        dead poll task would leave the cap frozen while episodes keep flowing."""
        try:
            samples = await self._poll()
            decisions = self._controller.on_poll(
                self._members.shown(samples),
                inflight=self.dispatcher.inflight,
                now=self._clock.now(),
            )
            self.polls += 1
            self._apply(decisions)
            self._route(samples)
            self._end_drains()
        except Exception:
            self.failed_polls += 1
            logger.exception("control loop: poll skipped, the cap holds")

    def _route(self, samples: Sequence[LoadSample]) -> None:
        """Keep new groups off engines with no rank up or stale. One failed scrape (stale)
        does not count: the server may well be serving while its metrics lag."""
        alive = {s.endpoint for s in samples if s.health is not EngineHealth.DOWN}
        down = frozenset({s.endpoint for s in samples} - alive)
        if down == self._down:
            return
        for engine in sorted(down - self._down):
            logger.warning("control loop: engine %s is down; new groups go elsewhere", engine)
        for engine in sorted(self._down - down):
            logger.info("control loop: engine %s is back; it takes new groups again", engine)
        self._down = down
        self.dispatcher.set_engines(self._members.routable(down))

    def _check_engines(self) -> None:
        """Fail the run, once, when no engine has been usable for the breakers' give-up time;
        checked every poll, so it fails at most a poll period after that time."""
        if self.failure is not None:
            return
        reason = self.dispatcher.breakers.gave_up(self._clock.now())
        if reason is None:
            return
        self.failure = reason
        logger.error("control loop: the run cannot go on: %s", reason)
        if self._on_failed is not None:
            self._on_failed(reason)

    def _engine_changed(self, change: EngineChange) -> None:
        """An engine taken out of routing or brought back: a decision on the run's timeline."""
        cap = self._controller.cap
        out = change.kind is ChangeKind.OUT
        self._apply(
            (
                Decision(
                    at=change.at,
                    kind=DecisionKind.ENGINE_OUT if out else DecisionKind.ENGINE_BACK,
                    cause=Cause.ENGINE_FAILING if out else Cause.ENGINE_ANSWERS,
                    signal=self._controller.make_stats(change.at).signal,
                    cap_before=cap,
                    cap_after=cap,
                    reason=change.reason,
                    alert=change.alert,
                    figures={"failures": change.failures, "backoff_s": change.backoff_s},
                    engine=change.engine,
                ),
            )
        )

    @property
    def engines(self) -> tuple[str, ...]:
        """The run's engines now, draining ones included."""
        return self._members.engines

    @property
    def leaving(self) -> tuple[Leaving, ...]:
        return self._members.leaving

    def add_engine(self, engine: str) -> Decision:
        """``engine`` joins the run: new groups may go to it at once (the controller rescales
        the cap when a poll first reports its KV). ValueError when it is in the run already.
        The decision is the caller's to apply (``command``), once linked to its command."""
        self._members.add(engine)
        self._pool_changed()
        return self._engine_decision(
            DecisionKind.ENGINE_JOIN, engine, f"{engine} joined the run: it takes new groups now"
        )

    def drain_engine(self, engine: str, drain_s: float) -> Decision:
        """``engine`` leaves the run: no new group goes to it from now, and after ``drain_s``
        what is still on it is cancelled; it has left once nothing is (``on_left``). The
        decision is the caller's to apply, as ``add_engine``'s."""
        leaving = self._members.drain(engine, self._clock.now(), drain_s)
        self._pool_changed()
        held = self.dispatcher.stats().inflight_by_engine.get(engine, 0)
        return self._engine_decision(
            DecisionKind.ENGINE_DRAIN,
            engine,
            f"{engine} leaves the run: no new groups; the {held} episodes on it have "
            f"{leaving.deadline - leaving.since:g} s to finish",
            {"inflight": held, "drain_s": leaving.deadline - leaving.since},
        )

    def _pool_changed(self) -> None:
        self.dispatcher.set_engines(self._members.routable(self._down))
        self._controller.set_pool(self._members.routable(()))

    def _end_drains(self) -> None:
        """End the drains that are over: an engine with nothing on it has left; one past its
        deadline has what is still on it cancelled (counted in the decision) first."""
        inflight = self.dispatcher.stats().inflight_by_engine
        for left in self._members.ended(self._clock.now(), inflight):
            cancelled = self.dispatcher.evict(left.engine) if left.past_deadline else 0
            self.dispatcher.forget(left.engine)
            self._apply((self._left_decision(left, cancelled),))
            if self._on_left is not None:
                self._on_left(left.engine)

    def _left_decision(self, left: Left, cancelled: int) -> Decision:
        if left.past_deadline:
            how = f"{cancelled} episodes still on it cancelled at its deadline"
        else:
            how = f"drained in {left.drained_s:.0f} s"
        return self._engine_decision(
            DecisionKind.ENGINE_LEAVE,
            left.engine,
            f"{left.engine} left the run: {how}",
            {"cancelled": cancelled, "drained_s": round(left.drained_s, 3)},
        )

    def _engine_decision(
        self, kind: DecisionKind, engine: str, reason: str, figures: dict[str, float] | None = None
    ) -> Decision:
        now, cap = self._clock.now(), self._controller.cap
        return Decision(
            at=now,
            kind=kind,
            cause=Cause.OPERATOR,
            signal=self._controller.make_stats(now).signal,
            cap_before=cap,
            cap_after=cap,
            reason=reason,
            figures=figures or {},
            engine=engine,
        )

    def _finished(self, finished: FinishedEpisode[P, R]) -> None:
        """The dispatcher's callback for every episode that left the pool."""
        if finished.outcome is not PermitOutcome.CANCELLED:
            self._complete(finished)
        if self._on_finished is not None:
            self._on_finished(finished)

    def _complete(self, finished: FinishedEpisode[P, R]) -> None:
        result = finished.result
        if finished.outcome is PermitOutcome.COMPLETED and result is not None:
            tokens, ok = result.tokens, result.ok
        else:
            tokens, ok = 0, False
        try:
            completion = EpisodeCompletion(
                tokens=tokens, ok=ok, pool=finished.pool, demand=self.dispatcher.demand
            )
        except ValueError:
            ticket = finished.ticket
            logger.exception(
                "control loop: episode %s/%d gave a result the controller cannot read",
                ticket.group_id,
                ticket.index,
            )
            return
        self._apply(self._controller.on_completion(completion, now=self._clock.now()))

    @property
    def controller(self) -> Steering:
        return self._controller

    def command(self, decision: Decision) -> None:
        """Apply the decision of an operator command the caller gave the controller (``pin``,
        ``set``, ``release``), as the loop applies its own."""
        self._apply((decision,))

    def _apply(self, decisions: tuple[Decision, ...]) -> None:
        self._log.extend(decisions)
        for decision in decisions:
            logger.info("control loop: %s", decision.reason)
        self.dispatcher.set_cap(self._controller.cap)
        shed = sum(decision.shed for decision in decisions)
        if shed:
            self.dispatcher.shed(shed)
        if self._on_decisions is not None:
            self._on_decisions(decisions)


def _failing_on_error(run_episode: RunEpisode[P, R]) -> RunEpisode[P, R]:
    """``run_episode``, raising ``EpisodeFailed`` for a result that is not ok."""

    async def run(ticket: EpisodeTicket[P], engine_id: str) -> R:
        result = await run_episode(ticket, engine_id)
        if not result.ok:
            raise EpisodeFailed(result)
        return result

    return run
