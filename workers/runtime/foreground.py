"""One run in the foreground, without Django or Celery: for a quick try and for debugging.

The engines are checked first (they answer, they serve the model); then the monitor, the
rollout clients, the batch writer and the reporters are built around the orchestrator, and
the run goes until its last step, a stop, or a failure. Its folder holds the batches
(``steps/``), the config as given, the decisions, steps and evaluation waves as JSON lines,
and the W&B run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from inference.engine_http import engine_http_client, rollout_session
from inference.metrics.client import MetricsClient
from inference.metrics.endpoints import EngineSpec
from inference.metrics.monitor import EngineMonitor, PollResult
from inference.metrics.warnings import batch_limit_warning
from inference.rollout_client import RolloutClient
from workers.core.clock import Clock, MonotonicClock
from workers.core.config.run import RunConfig
from workers.core.orchestrator.orchestrator import Orchestrator, RunResult
from workers.core.samples import LoadSample
from workers.runtime.acks import FileAcks
from workers.runtime.batch_files import TorchBatchWriter
from workers.runtime.engines import engine_specs, preflight
from workers.runtime.reporting import FanOut, JsonLines, Progress
from workers.runtime.wandb_log import WandbLog

logger = logging.getLogger(__name__)

CONNECTIONS_SPARE = 8  # beyond one per episode in flight: tokenize calls and retries


class Foreground:
    """Builds a run's runtime; ``run`` checks the engines, then runs it."""

    def __init__(
        self,
        config: RunConfig,
        output: Path,
        *,
        out: IO[str],
        clock: Clock | None = None,
        checkpoints: Path | None = None,
    ) -> None:
        """``checkpoints``: where a trainer's checkpoints must be (``PACER_CHECKPOINTS_DIR``);
        the run's folder when not given."""
        self.config = config
        self.output = output
        self.checkpoints = checkpoints or output
        self._out = out
        self._clock = clock or MonotonicClock()
        self.orchestrator: Orchestrator | None = None

    def stop(self, reason: str) -> None:
        if self.orchestrator is not None:
            self.orchestrator.stop(reason)

    async def run(self) -> RunResult:
        """ConfigError, before anything is written, when an engine fails the checks."""
        config, clock = self.config, self._clock
        specs = engine_specs(config.engines)
        connections = config.concurrency.controller.max_inflight + CONNECTIONS_SPARE
        async with engine_http_client(len(specs)) as http:
            model = await preflight(config, specs, http)
        self.output.mkdir(parents=True, exist_ok=True)
        (self.output / "config.json").write_text(json.dumps(config.document, indent=2))
        async with rollout_session(connections) as session:
            clients = {
                spec.name: RolloutClient(session, base_url=spec.base_url, model=model)
                for spec in specs
            }
            async with MetricsClient(engine_http_client(2 * len(specs))) as metrics:
                poll = EnginePoll(EngineMonitor(specs, metrics, clock), specs)
                jsonl = JsonLines(self.output)
                wandb = WandbLog(
                    config.wandb, name=config.name, folder=self.output, config=config.document
                )
                try:
                    orchestrator = self.orchestrator = Orchestrator(
                        config,
                        controller=config.concurrency.make_controller(),
                        poll=poll,
                        engines=clients,
                        clock=clock,
                        writer=TorchBatchWriter(self.output),
                        acks=FileAcks(self.output / "acks", clock, self.checkpoints)
                        if config.trainer.mode == "external"
                        else None,
                        reporter=FanOut(
                            [Progress(self._out, clock, config.max_steps), jsonl, wandb]
                        ),
                        max_model_len=poll.max_model_len,
                    )
                    poll.cap = lambda: orchestrator.loop.dispatcher.cap
                    return await orchestrator.run()
                finally:
                    wandb.close()
                    jsonl.close()


class EnginePoll:
    """The control loop's poll: the monitor's samples, with what the run needs besides them
    kept on the way (each engine's ``max_model_len``) and its warnings logged, the batch
    limit one (F13) once per stretch of the cap above it."""

    def __init__(self, monitor: EngineMonitor, specs: Sequence[EngineSpec]) -> None:
        self._monitor = monitor
        self._specs = tuple(specs)
        self._lengths: dict[str, int] = {}
        self._over_batch_limit = False
        self.cap: Callable[[], int] | None = None  # the cap in force, once the run has one
        self.on_poll: Callable[[PollResult], None] | None = None  # a reporter's, if any

    def max_model_len(self, engine: str) -> int | None:
        return self._lengths.get(engine)

    def base_urls(self) -> frozenset[str]:
        """The engines polled now, by URL: how runs on other hosts know them too."""
        return frozenset(spec.base_url for spec in self._specs)

    def add(self, spec: EngineSpec) -> None:
        """An engine joined the run: polled from now on."""
        self._monitor.add(spec)
        self._specs = (*self._specs, spec)

    def remove(self, name: str) -> None:
        """An engine left the run: polled no more."""
        self._monitor.remove(name)
        self._specs = tuple(spec for spec in self._specs if spec.name != name)
        self._lengths.pop(name, None)

    async def __call__(self) -> tuple[LoadSample, ...]:
        result = await self._monitor.poll()
        for sample in result.samples:
            if sample.max_model_len:
                known = self._lengths.get(sample.endpoint, sample.max_model_len)
                self._lengths[sample.endpoint] = min(known, sample.max_model_len)
        for warning in result.warnings:
            logger.warning("monitor: %s", warning.message)
        if self.cap is not None:
            limit = batch_limit_warning(self.cap(), result.samples, self._specs, result.at)
            if limit is not None and not self._over_batch_limit:
                logger.warning("monitor: %s", limit.message)
            self._over_batch_limit = limit is not None
        if self.on_poll is not None:
            self.on_poll(result)
        return result.samples
