"""Hosting one run inside a worker: lease, restore, run, report, hand back.

The Celery task calls ``host_run``, which runs one asyncio loop for the run: the orchestrator
(with the control loop, the monitor's polls and the rollout clients), the reporter's flush,
the lease's heartbeat and the operator commands. Everything the database is asked runs in
the run's own database thread.

A run continues from what is stored: the last step recorded (and any step on disk the
database never heard of), the policy version, the evaluation waves run, and the controller's
state through ``Controller.restore``, which records a restore decision and never bootstraps
again. It ends in one of three ways: its last step (completed), a failure (failed, with the
reason), or a stop: an operator's (cancelled, or paused), the worker's shutdown (queued again,
for the next worker at once), or the lease lost to another host (nothing written: the run is
someone else's now).

The host acts on its run only within its tenure (``workers.runtime.tenure``): the lease's
renewal is sent from a database thread of its own, so a flush stuck on a hung connection
cannot hold it up, and the heartbeat never waits on it. When the tenure's local deadline
passes without a successful renewal, the host abandons the run at once: the orchestrator is
cancelled (its engine requests aborted), a batch being written is not renamed into place,
nothing buffered is written, and nothing waits on the database on the way out.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from controlplane.runs.consumers import run_group_name
from controlplane.runs.models import Run, RunState
from controlplane.runs.queue import enqueue
from controlplane.runs.services import run_config_resolve
from inference.engine_http import engine_http_client, rollout_session
from inference.metrics.client import MetricsClient
from inference.metrics.endpoints import EngineSpec
from inference.metrics.monitor import EngineMonitor, PollResult
from inference.rollout_client import RolloutClient
from inference.weights_client import EngineWeightsClient
from workers.core.clock import MonotonicClock
from workers.core.config.fields import ConfigError
from workers.core.config.run import RunConfig
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import ObserveOnly
from workers.core.orchestrator.orchestrator import (
    Orchestrator,
    RunOutcome,
    RunResult,
    StartPoint,
)
from workers.logcontext import run_context
from workers.runtime import lease, store
from workers.runtime.batch_files import TorchBatchWriter
from workers.runtime.commands import PAUSED_BY_OPERATOR, STOPPED_BY_OPERATOR, Commands, DbAcks
from workers.runtime.engines import engine_specs, preflight
from workers.runtime.foreground import CONNECTIONS_SPARE, EnginePoll
from workers.runtime.reporter import RunReporter
from workers.runtime.reporting import FanOut
from workers.runtime.run_engines import RunEngines
from workers.runtime.run_folders import run_folder
from workers.runtime.sharing import PoolShare
from workers.runtime.tenure import RAN_OUT, Tenure, TenureLost
from workers.runtime.wandb_log import WandbLog

logger = logging.getLogger(__name__)

# Set when the worker is told to shut down: every run it hosts is handed back, state stored.
SHUTDOWN = threading.Event()
WORKER_SHUTDOWN = "the worker shut down; the run goes to the next worker"
LEASE_LOST = "the lease was lost; another worker hosts the run now"
# Engines down when a run starts may be restarting: this long before the run fails.
ENGINE_PATIENCE_S = 120.0
ENGINE_RETRY_S = 5.0
BACKGROUND_STOP_S = 10.0  # the reporter's last write, the command listener's unsubscribe
# An error no part of the run handles ends a hosting; the run is hosted again after a pause
# (a full disk freed, a restarting service back), and fails with the error as its reason
# once this many hostings in a row ended so. A step written in between counts afresh.
HOST_ATTEMPTS = 3
HOST_RETRY_S = 5.0


_hosting = 0  # hostings under way in this process
_hosting_lock = threading.Lock()


def host_run(run_id: int, owner: str) -> str:
    """Host the run until it ends or is handed back; what became of it, for the task's result."""
    global _hosting
    with _hosting_lock:
        _hosting += 1
    try:
        with run_context(run_id):
            return asyncio.run(Host(run_id, owner).run())
    finally:
        with _hosting_lock:
            _hosting -= 1


def hosted_here() -> int:
    """How many runs this process hosts now (the sweep claims no more than its room)."""
    with _hosting_lock:
        return _hosting


class Host:
    def __init__(self, run_id: int, owner: str) -> None:
        self.run_id = run_id
        self.owner = owner
        self._db = ThreadPoolExecutor(1, thread_name_prefix=f"run-{run_id}-db")
        self._lease_db = ThreadPoolExecutor(1, thread_name_prefix=f"run-{run_id}-lease")
        self._clock = MonotonicClock()
        self.tenure = Tenure(self._clock, taken_at=self._clock.now())
        self.orchestrator: Orchestrator | None = None
        self._driving: asyncio.Task[RunResult] | None = None  # the orchestrator's run
        self._beating: asyncio.Task[None] | None = None  # the heartbeat, while the lease is ours
        self._last_poll_at: float | None = None
        self._failure = ""  # why the engines could not be used, when they could not

    async def call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """``function`` in the run's database thread; a database error closes that thread's
        connection before it is raised, so the next call connects afresh (Django reconnects
        only between requests, and a worker has none)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, _reconnecting, function, args, kwargs)

    async def run(self) -> str:
        try:
            asked_at = self._clock.now()
            if not await self.call(lease.take, self.run_id, self.owner):
                return f"run {self.run_id} is hosted elsewhere or has ended"
            self.tenure = Tenure(self._clock, taken_at=asked_at)
            self._beating = asyncio.ensure_future(self._heartbeat())
            try:
                return await self._hosted()
            except (store.LeaseLost, TenureLost) as lost:
                self.tenure.lose(str(lost))
                logger.warning("host: run %d: %s (%s)", self.run_id, LEASE_LOST, lost)
                return LEASE_LOST
            except Exception as error:
                return await self._unexpected(error)
        finally:
            self._stop_heartbeat()
            # A host that lost its tenure may have a database thread stuck on a hung
            # connection: it closes its connection whenever that call returns, unwaited.
            held = self.tenure.held
            for executor in (self._db, self._lease_db):
                executor.submit(_close_connection)
                executor.shutdown(wait=held)

    async def _unexpected(self, error: Exception) -> str:
        """Host the run again after ``HOST_RETRY_S``, or fail it once ``HOST_ATTEMPTS``
        hostings in a row ended in an error: a run that cannot be hosted must end, with its
        reason, and a stop sent meanwhile must be able to end it (``store.end_run``)."""
        logger.exception("host: run %d: hosting ended in an unexpected error", self.run_id)
        if not self.tenure.held:
            return LEASE_LOST  # the run is not ours to count against or to end
        failures = await self.call(store.count_host_failure, self.run_id, self.owner)
        reason = f"{type(error).__name__}: {error}"
        if failures >= HOST_ATTEMPTS:
            return await self._end(
                RunState.FAILED, f"hosting failed {failures} times in a row; the last: {reason}"
            )
        logger.warning(
            "host: run %d: hosting failed (%d of %d), again in %g s: %s",
            self.run_id,
            failures,
            HOST_ATTEMPTS,
            HOST_RETRY_S,
            reason,
        )
        await asyncio.sleep(HOST_RETRY_S)
        return await self._hand_back()

    async def _hosted(self) -> str:
        run: Run = await self.call(store.load_run, self.run_id)
        try:
            config, names = await self.call(_checked, run.config)
        except ConfigError as refused:
            return await self._end(RunState.FAILED, f"the config is refused: {refused}")
        specs = engine_specs(config.engines, names)
        connections = config.concurrency.controller.max_inflight + CONNECTIONS_SPARE
        async with engine_http_client(len(specs)) as http:
            model = await self._model(config, specs, http)
        if model is None and SHUTDOWN.is_set():
            return await self._hand_back()
        if model is None:
            return await self._end(RunState.FAILED, self._failure)
        async with rollout_session(connections) as session:
            return await self._drive(run, config, specs, names, model, session)

    async def _model(self, config: RunConfig, specs: list[EngineSpec], http: Any) -> str | None:
        waited = 0.0
        while True:
            try:
                return await preflight(config, specs, http)
            except ConfigError as refused:
                if SHUTDOWN.is_set():
                    return None  # not the run's fault: the next worker tries again
                if waited >= ENGINE_PATIENCE_S:
                    self._failure = f"the engines are not ready: {refused}"
                    return None
                logger.warning("host: engines not ready (%s); retrying", refused)
            await asyncio.sleep(ENGINE_RETRY_S)
            waited += ENGINE_RETRY_S

    async def _drive(
        self,
        run: Run,
        config: RunConfig,
        specs: list[EngineSpec],
        names: list[str | None],
        model: str,
        session: aiohttp.ClientSession,
    ) -> str:
        self.tenure.check()  # abandoned while the engines were being waited for
        output = run_folder(Path(settings.PACER_RUNS_DIR), self.run_id, config.output_dir)
        writer = TorchBatchWriter(output, fence=self.tenure.check)
        last = await self.call(
            store.recover_steps, self.run_id, self.owner, writer.steps_dir, writer.written_steps()
        )
        acked = await self.call(store.acked, self.run_id, last) if last else None
        checkpoint = await self.call(store.last_checkpoint, self.run_id) if last else None
        unfinished = await self.call(store.open_waves, self.run_id)
        version = run.policy_version
        if config.trainer.mode == "none":
            version = max(version, last)
        elif acked is not None:
            version = max(version, acked.version)
        controller, restored = self._controller(config, run)
        await self.call(
            store.save_run, self.run_id, self.owner, model_name=model, output_dir=str(output)
        )
        registered = {spec.name: name for spec, name in zip(specs, names, strict=True) if name}
        reporter = RunReporter(
            run_id=self.run_id,
            owner=self.owner,
            db=self._db,
            clock=self._clock,
            send=_channel_send(),
            registered=registered,
            tenure=self.tenure,
            on_lease_lost=self._abandon,
            last_step=last,
        )
        if restored is not None:
            reporter.decisions((restored,))
        clients = {s.name: RolloutClient(session, base_url=s.base_url, model=model) for s in specs}
        wandb = WandbLog(
            config.wandb, name=f"{config.name}-{self.run_id}", folder=output, config=config.document
        )
        async with (
            MetricsClient(engine_http_client(2 * len(specs))) as metrics,
            engine_http_client(len(specs)) as weights_http,
        ):
            # Only a trainer sends weights back; their routes are reached only then.
            weights = (
                {s.name: EngineWeightsClient(weights_http, s.base_url) for s in specs}
                if config.trainer.mode == "external"
                else None
            )
            poll = EnginePoll(EngineMonitor(specs, metrics, self._clock), specs)
            engines = RunEngines(
                run_id=self.run_id,
                model=model,
                session=session,
                weights_http=weights_http if weights is not None else None,
                poll=poll,
                reporter=reporter,
                call=self.call,
            )
            commands_changed = asyncio.Event()
            orchestrator = self.orchestrator = Orchestrator(
                config,
                controller=controller,
                poll=poll,
                engines=clients,
                clock=self._clock,
                writer=writer,
                acks=DbAcks(self.run_id, self.call, commands_changed)
                if config.trainer.mode == "external"
                else None,
                reporter=FanOut([reporter, wandb]),
                max_model_len=poll.max_model_len,
                start=StartPoint(
                    last,
                    version,
                    run.eval_waves,
                    acknowledged=acked is not None,
                    open_waves=unfinished,
                    checkpoint=checkpoint,
                ),
                weights=weights,
                on_engine_left=engines.left,
            )
            engines.orchestrator = orchestrator
            poll.cap = lambda: orchestrator.loop.dispatcher.cap
            poll.on_poll = lambda result: reporter.poll(
                result,
                self._live(controller, result),
                self._inflight_by_engine(),
                orchestrator.weights_by_engine(),
            )
            sharing = PoolShare(
                run_id=self.run_id,
                owner=self.owner,
                weight=config.concurrency.share,
                priority=config.concurrency.priority,
                max_inflight=config.concurrency.controller.max_inflight,
                controller=controller,
                orchestrator=orchestrator,
                engine_urls=poll.base_urls,
                call=self.call,
                clock=self._clock,
                period_s=config.concurrency.poll_interval_s,
            )
            commands = Commands(
                run_id=self.run_id,
                owner=self.owner,
                controller=controller,
                orchestrator=orchestrator,
                reporter=reporter,
                engines=engines,
                sharing=sharing,
                call=self.call,
                clock=self._clock,
                redis_url=settings.REDIS_URL,
                live=lambda: self._live(controller, None),
            )
            commands.acks_changed = commands_changed
            background = [
                asyncio.ensure_future(reporter.run()),
                asyncio.ensure_future(commands.run()),
                asyncio.ensure_future(sharing.run()),
            ]
            self._driving = asyncio.ensure_future(orchestrator.run())
            try:
                result = await self._result(self._driving)
            finally:
                for task in background:
                    task.cancel()
                _, stuck = await asyncio.wait(background, timeout=BACKGROUND_STOP_S)
                if stuck:  # a run must end even when a helper task will not
                    logger.error("host: %d background tasks did not stop", len(stuck))
                wandb.close()
            self.tenure.check()  # abandoned: nothing more is written, nothing waited on
            reporter.set_live(self._live(controller, None))
            await reporter.close()
        return await self._finish(result, commands.ending)

    async def _result(self, driving: asyncio.Task[RunResult]) -> RunResult:
        """The orchestrator's result; ``TenureLost`` when the host abandoned it."""
        try:
            return await driving
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (current is not None and current.cancelling()) or self.tenure.held:
                raise
        raise TenureLost(self.tenure.lost or RAN_OUT)

    def _controller(self, config: RunConfig, run: Run) -> tuple[Controller | ObserveOnly, Any]:
        if run.controller_state is None:
            return config.concurrency.make_controller(), None
        saved_at = run.controller_state_at
        away = 0.0 if saved_at is None else (timezone.now() - saved_at).total_seconds()
        try:
            return config.concurrency.restore_controller(
                run.controller_state, now=self._clock.now(), away=away
            )
        except ValueError as refused:
            logger.error("host: stored controller state refused (%s); starting afresh", refused)
            return config.concurrency.make_controller(), None

    def _live(
        self, controller: Controller | ObserveOnly, result: PollResult | None
    ) -> dict[str, Any]:
        orchestrator = self.orchestrator
        assert orchestrator is not None
        now = self._clock.now()
        stats = orchestrator.loop.dispatcher.stats()
        figures = controller.make_stats(now)
        live: dict[str, Any] = {
            "cap": figures.cap,
            "policy_cap": figures.policy_cap,
            "inflight_train": stats.inflight_train,
            "inflight_eval": stats.inflight_eval,
            "policy_version": orchestrator.policy_version,
            "eval_waves": orchestrator.waves,
            "controller_state": controller.to_json(now),
            "controller_state_at": timezone.now(),
        }
        if result is not None:
            fresh = [s for s in result.samples if s.is_fresh]
            live["generation_tokens_per_s"] = _tokens_per_s(fresh, self._last_poll_at, result.at)
            self._last_poll_at = result.at
        return live

    def _inflight_by_engine(self) -> dict[str, tuple[int, int]]:
        """Episodes in flight on each engine: (train, eval)."""
        assert self.orchestrator is not None
        stats = self.orchestrator.loop.dispatcher.stats()
        train = stats.train_by_engine
        return {
            e: (train.get(e, 0), n - train.get(e, 0)) for e, n in stats.inflight_by_engine.items()
        }

    async def _heartbeat(self) -> None:
        """Keep the tenure (``Tenure.keep``), renewing from the lease's own database thread;
        abandon the run once it ends: another host holds the lease, or no renewal succeeded
        in time (the database away or hung for longer than the lease lasts)."""
        loop = asyncio.get_running_loop()
        reason = await self.tenure.keep(
            lambda: loop.run_in_executor(
                self._lease_db, _reconnecting, lease.renew, (self.run_id, self.owner), {}
            ),
            on_check=self._check_shutdown,
        )
        self._abandon(reason)

    def _check_shutdown(self) -> None:
        if SHUTDOWN.is_set():
            self._stop(WORKER_SHUTDOWN)

    def _stop_heartbeat(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            self._beating = None

    def _abandon(self, reason: str) -> None:
        """The tenure is over: stop driving the run now, mid-step if need be."""
        self.tenure.lose(reason)
        logger.warning("host: run %d abandoned: %s", self.run_id, reason)
        if self._driving is not None:
            self._driving.cancel()

    def _stop(self, reason: str) -> None:
        if self.orchestrator is not None:
            self.orchestrator.stop(reason)

    async def _finish(self, result: RunResult, ending: list[int]) -> str:
        logger.info("host: run ended: %s (%s)", result.outcome.value, result.reason)
        if result.outcome is RunOutcome.COMPLETED:
            return await self._end(RunState.COMPLETED, "", ending)
        if result.outcome is RunOutcome.FAILED:
            return await self._end(RunState.FAILED, result.reason, ending)
        if result.reason == WORKER_SHUTDOWN:
            return await self._hand_back(ending)
        if result.reason == PAUSED_BY_OPERATOR:
            return await self._end(RunState.PAUSED, "", ending)
        error = result.reason if result.reason != STOPPED_BY_OPERATOR else ""
        return await self._end(RunState.CANCELLED, error, ending)

    async def _hand_back(self, ending: Sequence[int] = ()) -> str:
        """Queue the run for the next worker at once, its state stored, unless a stop or a
        pause came meanwhile (``store.end_run``)."""
        written = await self._release(RunState.QUEUED, "", ending, enqueued_at=timezone.now())
        if written == RunState.QUEUED:
            await asyncio.get_running_loop().run_in_executor(None, enqueue, self.run_id)
        return self._outcome(written, "")

    async def _end(
        self, state: RunState, error: str, ending: Sequence[int] = (), **fields: Any
    ) -> str:
        return self._outcome(await self._release(state, error, ending, **fields), error)

    async def _release(
        self, state: RunState, error: str, ending: Sequence[int], **fields: Any
    ) -> RunState | None:
        """Release the lease with the run's new state (nothing is in flight any more); the
        state written, or None when the lease was not ours any more."""
        self._stop_heartbeat()
        written = await self.call(
            store.end_run,
            self.run_id,
            self.owner,
            state,
            error,
            ending,
            inflight_train=0,
            inflight_eval=0,
            generation_tokens_per_s=0.0,
            **fields,
        )
        if written is not None:
            if written != state:
                logger.info(
                    "host: run %d %s, not %s: an operator said so", self.run_id, written, state
                )
            await _send_state(self.run_id, written, error)
        return written

    def _outcome(self, written: RunState | None, error: str) -> str:
        """What became of the run, for the task's result."""
        if written is None:
            return LEASE_LOST
        return f"run {self.run_id} {written}" + (f": {error}" if error else "")


def _reconnecting(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return function(*args, **kwargs)
    except DatabaseError:
        connection.close()
        raise


def _close_connection() -> None:
    """Close the database thread's own connection (looked up in that thread)."""
    connection.close()


def _checked(document: Any) -> tuple[RunConfig, list[str | None]]:
    return run_config_resolve(document)


def _tokens_per_s(samples: list[Any], last: float | None, now: float) -> float:
    if last is None or now <= last:
        return 0.0
    return sum(s.generation_tokens for s in samples) / (now - last)


def _channel_send() -> Any:
    layer = get_channel_layer()
    return None if layer is None else layer.group_send


async def _send_state(run_id: int, state: str, error: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(
            run_group_name(run_id), {"type": "run.state", "data": {"state": state, "error": error}}
        )
    except Exception:
        logger.warning("host: state event not sent", exc_info=True)
