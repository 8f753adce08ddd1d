"""Operator commands reaching a hosted run: stored overrides applied to the controller (pin,
set, release), to the run's engines (add, remove), to its share of shared engines, or to the
run (pause, stop), and trainer acknowledgements.

The web process stores each command, then publishes a wake-up on the run's control channel
(``controlplane.runs.control``). This listener applies whatever is stored and pending on every
wake-up and every ``RECHECK_S`` besides, so a command sent while Redis was down, or before the
run had a host, is applied all the same, a little later. Each applied command answers with a
decision, linked to its override once written; a refused one (a pin on an observe-only run,
a cap outside the bounds) records why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import redis.asyncio as aioredis

from controlplane.runs.control import control_channel
from controlplane.runs.models import Override, OverrideMode
from workers.core.clock import Clock
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import ObserveOnly
from workers.core.decisions import Decision
from workers.core.members import DEFAULT_DRAIN_S
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.orchestrator.ports import Ack
from workers.runtime import store
from workers.runtime.reporter import RunReporter
from workers.runtime.run_engines import RunEngines
from workers.runtime.sharing import PoolShare

logger = logging.getLogger(__name__)

RECHECK_S = 2.0  # stored commands are looked at this often even with no wake-up
RECONNECT_S = 1.0  # pause before subscribing again after Redis went away
PAUSED_BY_OPERATOR = "paused by an operator"
STOPPED_BY_OPERATOR = "stopped by an operator"

Call = Callable[..., Awaitable[Any]]  # runs a function in the run's database thread
T = TypeVar("T")


class Commands:
    def __init__(
        self,
        *,
        run_id: int,
        owner: str,
        controller: Controller | ObserveOnly,
        orchestrator: Orchestrator,
        reporter: RunReporter,
        engines: RunEngines,
        sharing: PoolShare,
        call: Call,
        clock: Clock,
        redis_url: str,
        live: Callable[[], dict[str, Any]],
    ) -> None:
        self.run_id = run_id
        self._owner = owner
        self._controller = controller
        self._orchestrator = orchestrator
        self._reporter = reporter
        self._engines = engines
        self._sharing = sharing
        self._call = call
        self._clock = clock
        self._redis_url = redis_url
        self._live = live  # the run's live figures now: cap and policy cap move with a command
        self.acks_changed = asyncio.Event()  # a trainer acknowledged a step
        self.ending: list[int] = []  # pause and stop overrides, settled when the run has ended
        # Applied, their decisions not yet written: a look at the database before the
        # reporter's next flush still finds them pending, and must not apply them again.
        self._applied: set[int] = set()

    async def run(self) -> None:
        """Listen until cancelled; Redis going away only slows commands to ``RECHECK_S``."""
        await self.apply_pending()
        while True:
            try:
                await self._listen()
            except (aioredis.RedisError, OSError) as lost:
                logger.warning("commands: control channel lost (%s); reading stored ones", lost)
                await self.apply_pending()
                await asyncio.sleep(RECONNECT_S)

    async def _listen(self) -> None:
        client = aioredis.from_url(self._redis_url)
        try:
            pubsub = client.pubsub()
            await _cancellable(pubsub.subscribe(control_channel(self.run_id)))
            await self.apply_pending()  # anything sent before the subscription took
            while True:
                message = await _cancellable(
                    pubsub.get_message(ignore_subscribe_messages=True, timeout=RECHECK_S)
                )
                if message is not None and _kind(message) == "ack":
                    self.acks_changed.set()
                await self.apply_pending()
        finally:
            await client.aclose()

    async def apply_pending(self) -> None:
        """Apply what is stored and not yet applied; the database away only delays it."""
        try:
            pending = await self._call(store.pending_overrides, self.run_id)
            self._applied &= {override.pk for override in pending}  # settled: forgotten
            for override in pending:
                if override.pk in self.ending or override.pk in self._applied:
                    continue
                self._applied.add(override.pk)
                await self._apply(override)
        except Exception:
            logger.warning("commands: stored commands unreachable for now", exc_info=True)

    async def _apply(self, override: Override) -> None:
        mode = override.mode
        if mode in OverrideMode.cap_commands():
            try:
                decision = self._cap_command(override)
            except ValueError as refused:  # CommandRejected is one too
                await self._settle(override.pk, error=str(refused))
                return
            self._reporter.link(decision, override.pk)
            self._orchestrator.loop.command(decision)
            self._reporter.set_live(self._live())  # the run's cap written with its decision
        elif mode in (OverrideMode.ENGINE_ADD, OverrideMode.ENGINE_REMOVE):
            await self._engine_command(override)
        elif mode == OverrideMode.SHARE:
            decision = self._sharing.set_terms(override.share, override.priority)
            self._reporter.link(decision, override.pk)
            self._orchestrator.loop.command(decision)
        elif mode == OverrideMode.PAUSE:
            self.ending.append(override.pk)
            self._orchestrator.stop(PAUSED_BY_OPERATOR)
        elif mode == OverrideMode.STOP:
            self.ending.append(override.pk)
            self._orchestrator.stop(STOPPED_BY_OPERATOR)
        else:  # resume: the run is running already
            await self._settle(override.pk)

    async def _engine_command(self, override: Override) -> None:
        """Add or take out an engine. A host that started after the command was stored has
        the stored config's engines already: the command is settled as done."""
        name, adding = override.engine, override.mode == OverrideMode.ENGINE_ADD
        if self._engines.has(name) == adding:
            await self._settle(override.pk)
            return
        drain_s = DEFAULT_DRAIN_S if override.drain_s is None else override.drain_s
        try:
            decision = (
                await self._engines.add(name) if adding else self._engines.remove(name, drain_s)
            )
        except ValueError as refused:
            await self._settle(override.pk, error=str(refused))
            return
        decision = _with_reason(decision, f" - {override.reason}" if override.reason else "")
        self._reporter.link(decision, override.pk)
        self._orchestrator.loop.command(decision)

    async def _settle(self, override_id: int, *, error: str = "") -> None:
        await self._call(store.settle_override, self.run_id, self._owner, override_id, error=error)

    def _cap_command(self, override: Override) -> Decision:
        now = self._clock.now()
        suffix = f" - {override.reason}" if override.reason else ""
        if override.mode == OverrideMode.PIN:
            assert override.cap is not None and override.ttl_s is not None
            decision = self._controller.pin(override.cap, override.ttl_s, now=now)
        elif override.mode == OverrideMode.SET:
            assert override.cap is not None
            decision = self._controller.set(override.cap, now=now)
        else:
            decision = self._controller.release(now=now)
        return _with_reason(decision, suffix)


async def _cancellable(call: Awaitable[T]) -> T:
    """``call`` (a redis-py coroutine), then the task's cancellation if redis-py lost it.

    redis-py writes every command through ``asyncio.wait_for``, which on Python 3.11 returns
    the write's result when the task is cancelled just as the write completes: the
    cancellation is swallowed, and the listener went on for another ``RECHECK_S`` wait and
    more, holding its host for ``BACKGROUND_STOP_S`` (a pause applied as a host started, the
    listener then subscribing, once took 10 s). The task still counts the request
    (``Task.cancelling``), so it is raised here; on Python 3.12, whose ``wait_for`` keeps
    it, this never fires."""
    result = await call
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError("cancelled while redis-py was writing")
    return result


def _with_reason(decision: Decision, suffix: str) -> Decision:
    return replace(decision, reason=decision.reason + suffix) if suffix else decision


def _kind(message: dict[str, Any]) -> str | None:
    try:
        return json.loads(message["data"]).get("kind")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class DbAcks:
    """A trainer's acknowledgements as the REST API stores them, woken by the control channel
    and looked at every ``RECHECK_S`` besides."""

    def __init__(self, run_id: int, call: Call, changed: asyncio.Event) -> None:
        self.run_id = run_id
        self._call = call
        self._changed = changed

    async def wait(self, step: int) -> Ack:
        while True:
            try:
                ack = await self._call(store.acked, self.run_id, step)
            except Exception:  # the database away: the trainer's timeout still runs
                logger.warning("acks: acknowledgements unreadable for now", exc_info=True)
                ack = None
            if ack is not None:
                return ack
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RECHECK_S):  # not wait_for: see reporter.run
                    await self._changed.wait()
