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
"""

from __future__ import annotations

import asyncio
import logging
import threading
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
from controlplane.runs.services import enqueue, run_config_resolve
from inference.engine_http import engine_http_client, rollout_session
from inference.metrics.client import MetricsClient
from inference.metrics.endpoints import EngineSpec
from inference.metrics.monitor import EngineMonitor, PollResult
from inference.rollout_client import RolloutClient
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
from workers.runtime.run_folders import run_folder
from workers.runtime.wandb_log import WandbLog

logger = logging.getLogger(__name__)

# Set when the worker is told to shut down: every run it hosts is handed back, state stored.
SHUTDOWN = threading.Event()
SHUTDOWN_CHECK_S = 0.5
WORKER_SHUTDOWN = "the worker shut down; the run goes to the next worker"
LEASE_LOST = "the lease was lost; another worker hosts the run now"
# Engines down when a run starts may be restarting: this long before the run fails.
ENGINE_PATIENCE_S = 120.0
ENGINE_RETRY_S = 5.0
BACKGROUND_STOP_S = 10.0  # the reporter's last write, the command listener's unsubscribe


def host_run(run_id: int, owner: str) -> str:
    """Host the run until it ends or is handed back; what became of it, for the task's result."""
    with run_context(run_id):
        return asyncio.run(Host(run_id, owner).run())


class Host:
    def __init__(self, run_id: int, owner: str) -> None:
        self.run_id = run_id
        self.owner = owner
        self._db = ThreadPoolExecutor(1, thread_name_prefix=f"run-{run_id}-db")
        self._clock = MonotonicClock()
        self.orchestrator: Orchestrator | None = None
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
            if not await self.call(lease.take, self.run_id, self.owner):
                return f"run {self.run_id} is hosted elsewhere or has ended"
            return await self._hosted()
        finally:
            await self.call(_close_connection)
            self._db.shutdown(wait=True)

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
        output = run_folder(Path(settings.PACER_RUNS_DIR), self.run_id, config.output_dir)
        writer = TorchBatchWriter(output)
        last = await self.call(
            store.recover_steps, self.run_id, self.owner, writer.steps_dir, writer.written_steps()
        )
        acked = await self.call(store.acked_version, self.run_id, last) if last else None
        unfinished = await self.call(store.open_waves, self.run_id)
        version = run.policy_version
        if config.trainer.mode == "none":
            version = max(version, last)
        elif acked is not None:
            version = max(version, acked)
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
            last_step=last,
        )
        if restored is not None:
            reporter.decisions((restored,))
        clients = {s.name: RolloutClient(session, base_url=s.base_url, model=model) for s in specs}
        wandb = WandbLog(
            config.wandb, name=f"{config.name}-{self.run_id}", folder=output, config=config.document
        )
        async with MetricsClient(engine_http_client(2 * len(specs))) as metrics:
            poll = EnginePoll(EngineMonitor(specs, metrics, self._clock), specs)
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
                ),
            )
            poll.cap = lambda: orchestrator.loop.dispatcher.cap
            poll.on_poll = lambda result: reporter.poll(
                result, self._live(controller, result), self._inflight_by_engine()
            )
            commands = Commands(
                run_id=self.run_id,
                controller=controller,
                orchestrator=orchestrator,
                reporter=reporter,
                call=self.call,
                clock=self._clock,
                redis_url=settings.REDIS_URL,
                live=lambda: self._live(controller, None),
            )
            commands.acks_changed = commands_changed
            background = [
                asyncio.ensure_future(reporter.run()),
                asyncio.ensure_future(commands.run()),
                asyncio.ensure_future(self._heartbeat()),
            ]
            try:
                result = await orchestrator.run()
            finally:
                for task in background:
                    task.cancel()
                _, stuck = await asyncio.wait(background, timeout=BACKGROUND_STOP_S)
                if stuck:  # a run must end even when a helper task will not
                    logger.error("host: %d background tasks did not stop", len(stuck))
                wandb.close()
            reporter.set_live(self._live(controller, None))
            await reporter.close()
        return await self._finish(result, commands.ending)

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
        """Renew the lease; stop driving the run once it cannot be renewed in time (lost to
        another host, or the database away for longer than the lease lasts)."""
        last_renewed = self._clock.now()
        while True:
            await asyncio.sleep(SHUTDOWN_CHECK_S)
            if SHUTDOWN.is_set():
                self._stop(WORKER_SHUTDOWN)
                continue
            if self._clock.now() - last_renewed < lease.LEASE_RENEW_S:
                continue
            try:
                renewed = await self.call(lease.renew, self.run_id, self.owner)
            except Exception:
                logger.warning("host: lease renewal failed", exc_info=True)
                renewed = None
            if renewed:
                last_renewed = self._clock.now()
            elif (
                renewed is False
                or self._clock.now() - last_renewed > lease.LEASE_TTL_S - lease.LEASE_RENEW_S
            ):
                self._stop(LEASE_LOST)

    def _stop(self, reason: str) -> None:
        if self.orchestrator is not None:
            self.orchestrator.stop(reason)

    async def _finish(self, result: RunResult, ending: list[int]) -> str:
        logger.info("host: run ended: %s (%s)", result.outcome.value, result.reason)
        if result.outcome is RunOutcome.COMPLETED:
            outcome = await self._end(RunState.COMPLETED, "")
        elif result.outcome is RunOutcome.FAILED:
            outcome = await self._end(RunState.FAILED, result.reason)
        elif result.reason == LEASE_LOST:
            return LEASE_LOST
        elif result.reason == WORKER_SHUTDOWN:
            outcome = await self._hand_back()
        elif result.reason == PAUSED_BY_OPERATOR:
            outcome = await self._end(RunState.PAUSED, "")
        else:
            outcome = await self._end(
                RunState.CANCELLED, result.reason if result.reason != STOPPED_BY_OPERATOR else ""
            )
        for override_id in ending:
            await self.call(store.settle_override, override_id)
        return outcome

    async def _hand_back(self) -> str:
        """Queue the run for the next worker at once, its state stored."""
        outcome = await self._end(RunState.QUEUED, "", enqueued_at=timezone.now())
        await asyncio.get_running_loop().run_in_executor(None, enqueue, self.run_id)
        return outcome

    async def _end(self, state: RunState, error: str, **fields: Any) -> str:
        """Release the lease with the run's new state; nothing is in flight any more."""
        ended = state in RunState.ended()
        released = await self.call(
            lease.release,
            self.run_id,
            self.owner,
            state=state,
            error=error,
            finished_at=timezone.now() if ended else None,
            inflight_train=0,
            inflight_eval=0,
            generation_tokens_per_s=0.0,
            **fields,
        )
        if released:
            await _send_state(self.run_id, state, error)
        return f"run {self.run_id} {state}" + (f": {error}" if error else "")


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
