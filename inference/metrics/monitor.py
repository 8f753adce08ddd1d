"""The engine monitor: one ``poll()`` scrapes every engine at once and returns load samples.

Each endpoint is scraped in its own task under the client's per-scrape time limit, so a slow
or failing engine costs at most that limit and never holds back the others' numbers (F10).
Its failure is recorded (health STALE, then DOWN) and it is retried with backoff. So is an
exception no ScrapeError foresaw, logged with its traceback: a bug met on one engine's answer
must cost that engine's scrape, not the others' numbers or the whole poll. The numbers are
turned into samples by the pure modules beside this one; this module only sequences I/O and
keeps what the next poll needs: the previous readings, the last good samples, each endpoint's
status and its ``max_model_len``, fetched until it succeeds and then cached. A scrape that shows
the engine restarted reads ``/v1/models`` again before the poll's samples are made: a relaunched
engine may serve another length, and the restart's own sample must already carry it. That read
follows the metrics, so on that one poll the engine may cost twice the per-scrape limit.

Every data-parallel rank an endpoint has shown is remembered. A rank missing from a scrape
that otherwise worked keeps reporting its last gauges with zero deltas, STALE and then DOWN by
its own age, exactly like an engine whose scrape failed: a poll without its numbers must never
look complete. An endpoint not yet scraped successfully is one DOWN sample under its own name,
since its ranks are unknown until then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from inference.metrics import health
from inference.metrics.client import MetricsClient
from inference.metrics.deltas import ReadingDelta, reading_delta, restarted
from inference.metrics.endpoints import EngineSpec
from inference.metrics.errors import ScrapeError, ScrapeRefused
from inference.metrics.health import EndpointStatus, HealthConfig
from inference.metrics.parse import parse_exposition
from inference.metrics.readings import EngineReading
from inference.metrics.sampling import load_sample, stale_sample, unreached_sample
from inference.metrics.stats import DashboardStats, engine_stats, pool_stats
from inference.metrics.warnings import MonitorWarning, WarningConfig, WarningTracker
from workers.core.clock import Clock
from workers.core.samples import EngineHealth, LoadSample

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    health: HealthConfig = field(default_factory=HealthConfig)
    warnings: WarningConfig = field(default_factory=WarningConfig)


@dataclass(frozen=True, slots=True)
class PollResult:
    """Everything one poll learned."""

    at: float  # clock seconds when the poll began
    samples: tuple[LoadSample, ...]  # one per engine known so far, fresh or not
    endpoints: tuple[EndpointStatus, ...]  # one per configured endpoint, in config order
    stats: tuple[DashboardStats, ...]  # one per engine scraped this poll, then the pool
    warnings: tuple[MonitorWarning, ...]


@dataclass(slots=True)
class _Memory:
    """What the monitor keeps about one endpoint between polls."""

    status: EndpointStatus
    max_model_len: int | None = None
    refetch_models: bool = True  # until read once, and after a restart until read again
    # By engine id, for every rank the endpoint has shown: the last reading and when it was
    # scraped, and the last good sample, in the order the ranks first appeared.
    readings: dict[str, tuple[EngineReading, float]] = field(default_factory=dict)
    samples: dict[str, LoadSample] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One endpoint's scrape: readings or the error, and the models answer if it was asked."""

    scraped_at: float
    readings: dict[str, EngineReading] | None  # None when the scrape failed
    error: str = ""  # why it failed
    refused: bool = False  # it failed because nothing accepts connections: the engine is gone
    max_model_len: int | None = None
    models_error: str | None = None


class EngineMonitor:
    def __init__(
        self,
        specs: Sequence[EngineSpec],
        client: MetricsClient,
        clock: Clock,
        config: MonitorConfig | None = None,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"engine names must be unique, got {names}")
        self._specs = tuple(specs)
        self._client = client
        self._clock = clock
        self._config = config or MonitorConfig()
        self._memory = {spec.name: _Memory(health.unseen(spec.name)) for spec in specs}
        self._warnings = WarningTracker(self._config.warnings)

    def add(self, spec: EngineSpec) -> None:
        """An engine joined the run: polled from the next poll on, unseen until it answers."""
        if spec.name in self._memory:
            raise ValueError(f"engine {spec.name} is polled already")
        self._specs = (*self._specs, spec)
        self._memory[spec.name] = _Memory(health.unseen(spec.name))

    def remove(self, name: str) -> None:
        """An engine left the run: polled no more, and forgotten."""
        self._specs = tuple(spec for spec in self._specs if spec.name != name)
        self._memory.pop(name, None)

    async def poll(self) -> PollResult:
        now = self._clock.now()
        # The engines as the poll starts: one added while it awaits is polled from the next
        # poll on (looked at now, it would count as skipped without being due).
        specs = self._specs
        due = [spec for spec in specs if self._memory[spec.name].status.due]
        outcomes = dict(
            zip(
                (spec.name for spec in due),
                await asyncio.gather(*(self._scrape(spec) for spec in due)),
                strict=True,
            )
        )
        samples: list[LoadSample] = []
        stats: list[DashboardStats] = []
        deltas: list[ReadingDelta] = []
        for spec in specs:
            if spec.name not in self._memory:
                continue  # it left the run while the poll awaited
            outcome = outcomes.get(spec.name)
            if outcome is not None and outcome.readings is not None:
                samples += self._fresh(spec, outcome, outcome.readings, stats, deltas)
            else:
                samples += self._stale(spec, outcome, now)
        if deltas:
            stats.append(pool_stats(deltas))
        return PollResult(
            now,
            tuple(samples),
            tuple(self._memory[s.name].status for s in specs if s.name in self._memory),
            tuple(stats),
            self._warnings.observe(samples, now),
        )

    async def _scrape(self, spec: EngineSpec) -> _Outcome:
        memory = self._memory[spec.name]
        if memory.refetch_models:
            metrics, models = await asyncio.gather(self._metrics(spec), self._models(spec))
        else:
            metrics = await self._metrics(spec)
            if not _shows_restart(memory, metrics):
                return metrics
            models = await self._models(spec)
        if isinstance(models, int):
            return replace(metrics, max_model_len=models)
        return replace(metrics, models_error=models)

    async def _metrics(self, spec: EngineSpec) -> _Outcome:
        try:
            text = await self._client.metrics_text(spec.base_url)
            readings = parse_exposition(text, spec.name)
        except ScrapeError as exc:
            return _Outcome(
                self._clock.now(), None, _why(exc), refused=isinstance(exc, ScrapeRefused)
            )
        except Exception as exc:
            logger.exception("monitor: scrape of %s failed unexpectedly", spec.name)
            return _Outcome(self._clock.now(), None, _why(exc))
        return _Outcome(self._clock.now(), readings)

    async def _models(self, spec: EngineSpec) -> int | str:
        """The engine's max_model_len, or the text of why it could not be read."""
        try:
            return await self._client.max_model_len(spec.base_url)
        except ScrapeError as exc:
            return _why(exc)
        except Exception as exc:
            logger.exception("monitor: /v1/models of %s failed unexpectedly", spec.name)
            return _why(exc)

    def _fresh(
        self,
        spec: EngineSpec,
        outcome: _Outcome,
        readings: dict[str, EngineReading],
        stats: list[DashboardStats],
        deltas: list[ReadingDelta],
    ) -> list[LoadSample]:
        memory = self._remember_models(spec, outcome)
        memory.status = health.succeeded(memory.status, outcome.scraped_at)
        at = outcome.scraped_at
        for engine_id, reading in readings.items():
            previous, previous_at = memory.readings.get(engine_id, (None, None))
            elapsed = None if previous_at is None else at - previous_at
            delta = reading_delta(previous, reading, elapsed, self._config.health.down_after_s)
            memory.readings[engine_id] = (reading, at)
            memory.samples[engine_id] = load_sample(
                engine_id, spec, at, reading, delta, memory.max_model_len
            )
            stats.append(engine_stats(engine_id, delta))
            deltas.append(delta)
        return [
            sample if engine_id in readings else self._aged(sample, at, memory.max_model_len)
            for engine_id, sample in memory.samples.items()
        ]

    def _stale(self, spec: EngineSpec, outcome: _Outcome | None, now: float) -> list[LoadSample]:
        """Samples of an endpoint without fresh numbers: each rank's last gauges, zero deltas."""
        memory = self._memory[spec.name]
        if outcome is None:
            at = now
            memory.status = health.skipped(memory.status, at, self._config.health)
        else:
            at = outcome.scraped_at
            memory = self._remember_models(spec, outcome)
            memory.status = health.failed(
                memory.status, at, outcome.error, self._config.health, refused=outcome.refused
            )
        if not memory.samples:
            return [unreached_sample(spec, now, memory.status.health, memory.max_model_len)]
        if memory.status.health is EngineHealth.DOWN:  # refused: every rank is gone with it
            return [
                stale_sample(sample, EngineHealth.DOWN, memory.max_model_len)
                for sample in memory.samples.values()
            ]
        return [self._aged(sample, at, memory.max_model_len) for sample in memory.samples.values()]

    def _aged(self, last: LoadSample, now: float, max_model_len: int | None) -> LoadSample:
        """A rank's last good sample, STALE or DOWN by the age of its own numbers."""
        state = health.without_success(last.scraped_at, now, self._config.health)
        return stale_sample(last, state, max_model_len)

    def _remember_models(self, spec: EngineSpec, outcome: _Outcome) -> _Memory:
        memory = self._memory[spec.name]
        if outcome.max_model_len is not None:
            memory.max_model_len = outcome.max_model_len
            memory.refetch_models = False
            memory.status = replace(memory.status, models_error=None)
        elif outcome.models_error is not None:
            memory.refetch_models = True
            memory.status = replace(memory.status, models_error=outcome.models_error)
        return memory


def _shows_restart(memory: _Memory, outcome: _Outcome) -> bool:
    """Whether any rank of a good scrape comes from a later life of the engine than before."""
    return outcome.readings is not None and any(
        engine_id in memory.readings and restarted(memory.readings[engine_id][0], reading)
        for engine_id, reading in outcome.readings.items()
    )


def _why(exc: Exception) -> str:
    """An endpoint's error text: the exception's type says which failure, its message where."""
    return f"{type(exc).__name__}: {exc}"
