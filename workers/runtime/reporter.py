"""The run's reporter: every decision and every poll's engine samples to the database in
batches, to the run's Channels group for the dashboard, and its live figures onto the run.

The control loop must never wait on the database: reports are buffered and written by one
flush task every ``FLUSH_S`` in the run's database thread, decisions first, each batch in
order. A write that fails (the database restarting) keeps its rows for the next flush, up to
``MAX_BUFFERED_ROWS``; beyond that the oldest engine samples are dropped and counted (an
alert), and decisions are kept. Live events carry the database id of what they show, so a
browser that reconnects and reads the API's history can merge without duplicates; they go out
right after the rows are stored.

Every flush is one transaction under the run's lease (``store.under_lease``), and none starts
once the host's tenure is over (``workers.runtime.tenure``): a host that lost its lease
(stalled, or its database hung) drops what it holds instead of writing it into the next
host's timeline. The next host continues from the last step recorded, so nothing the run
needs is lost with them: the dropped rows are decisions and samples of a tenure that had
already ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from controlplane.runs.consumers import run_group_name
from controlplane.runs.models import EngineSample
from inference.metrics.monitor import PollResult
from workers.core.clock import Clock
from workers.core.decisions import Decision
from workers.core.orchestrator.batches import EvalReport, StepReport, WaveStart
from workers.core.samples import LoadSample
from workers.runtime import store
from workers.runtime.tenure import RAN_OUT, Tenure

logger = logging.getLogger(__name__)

FLUSH_S = 0.25  # decisions reach the dashboard within this of being made
# As a run ends its last records are retried this long while the database is away: a
# PostgreSQL restart takes seconds, and the run's state is written only after them.
CLOSE_RETRY_S = 30.0
CLOSE_BACKOFF_MAX_S = 4.0
MAX_BUFFERED_ROWS = 200_000  # about 10 min of 5 s polls of 1,000 engines, held while the DB is away
Send = Callable[[str, dict[str, Any]], Awaitable[None]]  # a Channels group_send
# Live figures kept for a restart, not for a page.
STORED_ONLY = frozenset({"controller_state", "controller_state_at"})


@dataclass(slots=True)
class _PendingDecision:
    decision: Decision
    at: datetime
    step: int
    override_id: int | None = None  # the operator command it answers


class RunReporter:
    def __init__(
        self,
        *,
        run_id: int,
        owner: str,
        db: Executor,
        clock: Clock,
        send: Send | None,
        registered: dict[str, str] | None = None,
        tenure: Tenure | None = None,
        on_lease_lost: Callable[[str], None] = lambda reason: None,
        last_step: int = 0,
    ) -> None:
        self.run_id = run_id
        self._tenure = tenure
        self._on_lease_lost = on_lease_lost
        self.lease_lost: str | None = None  # why nothing more is written, once it is so
        self._owner = owner
        self._db = db
        self._clock = clock
        self._send = send
        self._registered = registered or {}  # engine endpoint -> registered name
        self._decisions: deque[_PendingDecision] = deque()
        self._links: dict[int, int] = {}  # id() of a command's decision -> its override
        self._samples: deque[EngineSample] = deque()
        self._jobs: deque[Callable[[], Any]] = deque()  # steps, evals, in order
        self._live: dict[str, Any] = {}
        self._health: dict[str, dict[str, Any]] | None = None
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._last_scrape: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._flushing = asyncio.Lock()  # one flush at a time: a second must not copy the first
        # The last step written, which decisions are filed under: a restored run's stored
        # step until it writes one, so its restore decision is not filed under step 0.
        self.last_step = last_step
        self.dropped_samples = 0
        self.failed_flushes = 0

    # -- the orchestrator's reports ---------------------------------------------------------

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        for decision in decisions:
            override_id = self._links.pop(id(decision), None)
            self._decisions.append(
                _PendingDecision(decision, self.wall(decision.at), self.last_step, override_id)
            )
        if decisions:
            self._wake.set()

    def register(self, endpoint: str, name: str | None) -> None:
        """An engine joined the run; ``name`` is its registered name, if it has one (its
        health is then kept on the engine's row too)."""
        if name:
            self._registered[endpoint] = name

    def forget(self, endpoint: str) -> None:
        self._registered.pop(endpoint, None)

    def link(self, decision: Decision, override_id: int) -> None:
        """``decision`` answers the stored override ``override_id``: when it is reported, the
        override is settled with it."""
        self._links[id(decision)] = override_id

    def step(self, report: StepReport) -> None:
        self.last_step = report.step
        started, written = self.wall(report.started_at), self.wall(report.written_at)
        self._jobs.append(lambda: self._insert_step(report, started, written))
        self._events.append(("run.step", _step_event(report, written)))
        self._wake.set()

    def eval_started(self, start: WaveStart) -> None:
        started = self.wall(start.started_at)
        self._jobs.append(lambda: store.insert_eval_start(self.run_id, self._owner, start, started))
        self._wake.set()

    def eval(self, report: EvalReport) -> None:
        started, finished = self.wall(report.started_at), self.wall(report.finished_at)
        self._jobs.append(
            lambda: store.insert_eval(self.run_id, self._owner, report, started, finished)
        )
        self._wake.set()

    # -- the host's own reports -------------------------------------------------------------

    def poll(
        self,
        result: PollResult,
        live: dict[str, Any],
        inflight: dict[str, tuple[int, int]],
        weights: Mapping[str, tuple[int | None, bool]] | None = None,
    ) -> None:
        """One poll of the engines, the run's live figures at it, its episodes in flight on
        each engine (train, eval), which go with the engine's first rank, and, when the run
        relays weights, each engine's served version (None before the run knows it) and
        whether it is updating now, for the dashboard's engine table."""
        at = self.wall(result.at)
        engines = []
        counted: set[str] = set()
        for sample in result.samples:
            previous = self._last_scrape.get(sample.engine_id)
            interval = None if previous is None else sample.scraped_at - previous
            self._last_scrape[sample.engine_id] = sample.scraped_at
            staleness = max(0.0, result.at - sample.scraped_at)
            train, eval_ = (
                (0, 0) if sample.endpoint in counted else inflight.get(sample.endpoint, (0, 0))
            )
            counted.add(sample.endpoint)
            row = _sample_row(self.run_id, at, sample, interval, staleness)
            row.inflight_train, row.inflight_eval = train, eval_
            self._samples.append(row)
            engines.append(
                {
                    **_engine_event(sample, interval, staleness),
                    "inflight_train": train,
                    "inflight_eval": eval_,
                    **_weights_event(sample.endpoint, weights),
                }
            )
        self._trim()
        self._live = live
        self._health = {
            self._registered[s.endpoint]: {"health": s.health.value, "kv_usage": s.kv_usage}
            for s in result.samples
            if s.endpoint in self._registered
        }
        warnings = [w.message for w in result.warnings]
        shown = {k: v for k, v in live.items() if k not in STORED_ONLY}
        self._events.append(
            (
                "engine.health",
                {"at": at.isoformat(), **shown, "engines": engines, "warnings": warnings},
            )
        )

    def set_live(self, live: dict[str, Any]) -> None:
        """Live figures for the next flush, over those of a poll not yet written (a command's
        new cap, the last figures as a run ends)."""
        self._live = {**self._live, **live}

    def wall(self, at: float) -> datetime:
        """A clock reading as wall time: the clock is monotonic, the database wants dates."""
        return datetime.fromtimestamp(time.time() - (self._clock.now() - at), UTC)

    # -- writing ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Flush every ``FLUSH_S``, or at once when a decision arrives, until cancelled. A
        flush under way when the task is cancelled runs to its end (shielded), so its rows
        are written once and ``close`` finds them gone from the buffers."""
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the
            # cancellation that ends this task when the event fires at the same moment.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_S):
                    await self._wake.wait()
            self._wake.clear()
            await asyncio.shield(self.flush())

    async def close(self) -> bool:
        """The last flush as a run ends, retried for ``CLOSE_RETRY_S`` while the database is
        away; False (and an error logged with what is lost) when it never came back."""
        deadline = self._clock.now() + CLOSE_RETRY_S
        backoff = FLUSH_S
        while not await self.flush():
            if self.lease_lost is not None:
                return False
            if self._clock.now() + backoff > deadline:
                logger.error(
                    "reporter: run %d ends with %d decisions, %d samples and %d step or eval "
                    "records never stored: the database was away for %g s",
                    self.run_id,
                    len(self._decisions),
                    len(self._samples),
                    len(self._jobs),
                    CLOSE_RETRY_S,
                )
                return False
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, CLOSE_BACKOFF_MAX_S)
        return True

    async def flush(self) -> bool:
        """Write what is buffered, then send its events; False when the database refused."""
        async with self._flushing:
            return await self._flush()

    async def _flush(self) -> bool:
        if self.lease_lost is not None:
            return False
        if self._tenure is not None and not self._tenure.held:
            self._lose(self._tenure.lost or RAN_OUT)
            return False
        decisions = list(self._decisions)
        samples = list(self._samples)
        jobs = list(self._jobs)
        live, health = self._live, self._health
        events, self._events = self._events, []
        if not (decisions or samples or jobs or live or events):
            return True
        loop = asyncio.get_running_loop()
        try:
            ids = await loop.run_in_executor(
                self._db, self._write, decisions, samples, jobs, live, health
            )
        except store.LeaseLost as lost:
            self._lose(str(lost))
            return False
        except Exception:
            await loop.run_in_executor(self._db, _forget_connection)
            self.failed_flushes += 1
            self._events = events + self._events
            logger.exception(
                "reporter: the database refused %d decisions and %d samples; kept for later",
                len(decisions),
                len(samples),
            )
            return False
        for _ in decisions:
            self._decisions.popleft()
        for _ in samples:
            self._samples.popleft()
        for _ in jobs:
            self._jobs.popleft()
        if live is self._live:
            self._live = {}
        decision_events = [
            ("run.decision", _decision_event(self.run_id, pending, row_id))
            for pending, row_id in zip(decisions, ids, strict=True)
        ]
        await self._publish([*decision_events, *events])
        return True

    def _write(
        self,
        decisions: list[_PendingDecision],
        samples: list[EngineSample],
        jobs: list[Callable[[], Any]],
        live: dict[str, Any],
        health: dict[str, dict[str, Any]] | None,
    ) -> list[int]:
        ids: list[int] = []
        run_id, owner = self.run_id, self._owner
        # All or nothing (a retried flush must not write twice), and under the lease.
        with store.under_lease(run_id, owner):
            for step, batch in itertools.groupby(decisions, key=lambda p: p.step):
                pending = list(batch)
                stored = store.insert_decisions(
                    run_id, owner, step, [(p.decision, p.at) for p in pending]
                )
                for one, row_id in zip(pending, stored, strict=True):
                    if one.override_id is not None:
                        store.settle_override(run_id, owner, one.override_id, decision_id=row_id)
                ids.extend(stored)
            if samples:
                store.insert_samples(run_id, owner, samples)
            for job in jobs:
                job()
            if live:
                store.save_run(run_id, owner, **live)
            if health:
                store.record_engine_health(run_id, owner, health)
        return ids

    def _insert_step(self, report: StepReport, started: datetime, written: datetime) -> None:
        store.insert_step(self.run_id, self._owner, report, started, written)

    def _lose(self, reason: str) -> None:
        """The lease is gone: drop what is buffered, write nothing more, tell the host."""
        self.lease_lost = reason
        logger.warning(
            "reporter: run %d: %s; %d decisions, %d samples and %d step or eval records of "
            "this host are dropped (the next host continues from the last step recorded)",
            self.run_id,
            reason,
            len(self._decisions),
            len(self._samples),
            len(self._jobs),
        )
        self._decisions.clear()
        self._samples.clear()
        self._jobs.clear()
        self._events.clear()
        self._live = {}
        self._on_lease_lost(reason)

    async def _publish(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        if self._send is None:
            return
        group = run_group_name(self.run_id)
        for kind, data in events:
            try:
                await self._send(group, {"type": kind, "data": data})
            except Exception:  # the dashboard is a view: Redis away must not stop the run
                logger.warning("reporter: live event %s not sent", kind, exc_info=True)

    def _trim(self) -> None:
        excess = len(self._samples) + len(self._decisions) - MAX_BUFFERED_ROWS
        for _ in range(max(0, min(excess, len(self._samples)))):
            self._samples.popleft()
            self.dropped_samples += 1
        if excess > 0:
            logger.error(
                "reporter: %d engine samples dropped so far: the database is away too long",
                self.dropped_samples,
            )


def _sample_row(
    run_id: int, at: datetime, sample: LoadSample, interval: float | None, staleness: float
) -> EngineSample:
    return EngineSample(
        run_id=run_id,
        at=at,
        engine_id=sample.engine_id,
        role=sample.role.value,
        health=sample.health.value,
        kv_capacity_tokens=sample.kv_capacity_tokens,
        max_model_len=sample.max_model_len,
        kv_usage=sample.kv_usage,
        num_running=sample.num_running,
        num_waiting=sample.num_waiting,
        num_waiting_capacity=sample.num_waiting_capacity,
        num_preemptions=sample.num_preemptions,
        prefix_cache_hits=sample.prefix_cache_hits,
        prefix_cache_queries=sample.prefix_cache_queries,
        generation_tokens=sample.generation_tokens,
        restarted=sample.restarted,
        interval_s=interval,
        staleness_s=staleness,
    )


def _engine_event(sample: LoadSample, interval: float | None, staleness: float) -> dict[str, Any]:
    per_s = None if not interval else 1.0 / interval
    queries = sample.prefix_cache_queries
    return {
        "engine_id": sample.engine_id,
        "role": sample.role.value,
        "health": sample.health.value,
        "staleness_s": staleness,
        "kv_usage": sample.kv_usage,
        "running": sample.num_running,
        "waiting": sample.num_waiting,
        "waiting_capacity": sample.num_waiting_capacity,
        "preemptions_per_s": None if per_s is None else sample.num_preemptions * per_s,
        "generation_tokens_per_s": None if per_s is None else sample.generation_tokens * per_s,
        "prefix_hit_rate": sample.prefix_cache_hits / queries if queries else None,
        "restarted": sample.restarted,
    }


def _weights_event(
    endpoint: str, weights: Mapping[str, tuple[int | None, bool]] | None
) -> dict[str, Any]:
    """The engine's served version and whether it is updating; None and False for a run
    that relays no weights (its engines' version is only the trainer's word)."""
    version, updating = (None, False) if weights is None else weights.get(endpoint, (None, False))
    return {"weight_version": version, "updating": updating}


def _decision_event(run_id: int, pending: _PendingDecision, row_id: int) -> dict[str, Any]:
    return {
        "id": row_id,
        "run": run_id,
        "step": pending.step,
        **pending.decision.to_json(),
        "at": pending.at.isoformat(),
        "override": pending.override_id,
    }


def _step_event(report: StepReport, written: datetime) -> dict[str, Any]:
    return {
        "step": report.step,
        "written_at": written.isoformat(),
        "seconds": report.seconds,
        "episodes": report.episodes,
        "reward_mean": report.reward_mean,
        "reward_std": report.reward_std,
        "policy_version": report.policy_version,
        "tokens_per_second": report.tokens_per_second,
    }


def _forget_connection() -> None:
    """After a failed write: the next flush connects afresh (the database may be back)."""
    connection.close()
