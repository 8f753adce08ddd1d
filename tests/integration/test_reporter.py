"""The run reporter against the real database: a flush cut off by the run's end is written
once, and the last records of a run wait out a database that is briefly away."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from controlplane.runs.models import Decision as DecisionRow
from controlplane.runs.models import Run, RunState, StepRecord
from workers.core.clock import MonotonicClock
from workers.core.decisions import Cause, Decision, DecisionKind, Signal
from workers.core.orchestrator.batches import StepReport
from workers.runtime import reporter as reporter_module
from workers.runtime import store
from workers.runtime.reporter import RunReporter

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "test-host"


@pytest.fixture
def run() -> Run:
    return Run.objects.create(
        name="reported",
        config={},
        state=RunState.RUNNING,
        lease_owner=OWNER,
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )


@pytest.fixture
def db_thread() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(1)
    yield executor
    executor.submit(lambda: connection.close()).result()  # the thread's own connection
    executor.shutdown(wait=True)


def grow(at: float, before: int) -> Decision:
    return Decision(
        at=at,
        kind=DecisionKind.GROW,
        cause=Cause.CLEAR,
        signal=Signal.CLEAR,
        cap_before=before,
        cap_after=before + 1,
        reason=f"Increased concurrency {before} -> {before + 1} (clear)",
    )


def step_report(step: int, at: float) -> StepReport:
    return StepReport(
        step=step,
        started_at=at - 1.0,
        written_at=at,
        policy_version=step - 1,
        episodes=8,
        tokens=800,
        reward_mean=0.5,
        reward_std=0.1,
        generated_tokens=800,
        finished_train=8,
        finished_eval=0,
        failed=0,
        cancelled=0,
        dropped_groups=0,
        cap=4,
        inflight=4,
        path=f"/runs/{step:06d}",
    )


def make_reporter(
    run: Run, db: ThreadPoolExecutor, clock: MonotonicClock, lost: list[str] | None = None
) -> RunReporter:
    return RunReporter(
        run_id=run.pk,
        owner=OWNER,
        db=db,
        clock=clock,
        send=None,
        on_lease_lost=(lost if lost is not None else []).append,
    )


def test_a_flush_under_way_when_the_run_ends_is_written_once(
    run: Run, db_thread: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = MonotonicClock()
    writing, release = threading.Event(), threading.Event()
    insert = store.insert_decisions

    def slow_insert(*args: Any) -> list[int]:
        writing.set()
        release.wait(10)
        return insert(*args)

    monkeypatch.setattr(store, "insert_decisions", slow_insert)

    async def scenario() -> bool:
        reporter = make_reporter(run, db_thread, clock)
        task = asyncio.ensure_future(reporter.run())
        reporter.decisions((grow(clock.now(), 4), grow(clock.now(), 5)))
        reporter.step(step_report(1, clock.now()))
        await asyncio.get_running_loop().run_in_executor(None, writing.wait, 10)
        task.cancel()  # the run ends while its flush is in the database thread
        await asyncio.wait([task], timeout=5)
        release.set()
        return await reporter.close()

    assert asyncio.run(scenario())
    caps = list(DecisionRow.objects.filter(run=run).values_list("cap_after", flat=True))
    assert sorted(caps) == [5, 6]
    assert list(StepRecord.objects.filter(run=run).values_list("step", flat=True)) == [1]


def test_the_last_records_wait_out_a_database_briefly_away(
    run: Run, db_thread: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = MonotonicClock()
    refusals = iter(range(3))
    insert = store.insert_decisions

    def flaky_insert(*args: Any) -> list[int]:
        if next(refusals, None) is not None:
            raise OperationalError("the database system is starting up")
        return insert(*args)

    monkeypatch.setattr(store, "insert_decisions", flaky_insert)

    async def scenario() -> tuple[bool, int]:
        reporter = make_reporter(run, db_thread, clock)
        reporter.decisions((grow(clock.now(), 4),))
        reporter.step(step_report(7, clock.now()))
        return await reporter.close(), reporter.failed_flushes

    closed, failed = asyncio.run(scenario())
    assert closed
    assert failed == 3
    assert DecisionRow.objects.filter(run=run).count() == 1
    assert list(StepRecord.objects.filter(run=run).values_list("step", flat=True)) == [7]
    assert Run.objects.get(pk=run.pk).step == 7


def test_records_a_database_never_takes_are_reported_lost(
    run: Run,
    db_thread: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = MonotonicClock()

    def refused(*args: Any) -> list[int]:
        raise OperationalError("connection refused")

    monkeypatch.setattr(store, "insert_decisions", refused)
    monkeypatch.setattr(reporter_module, "CLOSE_RETRY_S", 1.0)

    async def scenario() -> bool:
        reporter = make_reporter(run, db_thread, clock)
        reporter.decisions((grow(clock.now(), 4),))
        reporter.step(step_report(3, clock.now()))
        return await reporter.close()

    assert not asyncio.run(scenario())
    assert "1 decisions, 0 samples and 1 step or eval records never stored" in caplog.text
    assert not StepRecord.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    "lost_lease",
    [{"lease_owner": "another-host"}, {"lease_expires_at": timezone.now() - timedelta(seconds=1)}],
    ids=["taken-by-another", "expired"],
)
def test_a_host_that_lost_the_lease_writes_nothing_and_is_told(
    run: Run,
    db_thread: ThreadPoolExecutor,
    caplog: pytest.LogCaptureFixture,
    lost_lease: dict[str, Any],
) -> None:
    Run.objects.filter(pk=run.pk).update(**lost_lease)
    clock = MonotonicClock()
    lost: list[str] = []

    async def scenario() -> bool:
        reporter = make_reporter(run, db_thread, clock, lost)
        reporter.decisions((grow(clock.now(), 4),))
        reporter.step(step_report(2, clock.now()))
        reporter.set_live({"cap": 99})
        return await reporter.close()

    assert not asyncio.run(scenario())
    assert not StepRecord.objects.filter(run=run).exists()
    assert not DecisionRow.objects.filter(run=run).exists()
    assert Run.objects.get(pk=run.pk).cap is None
    assert lost and "the lease is not held by test-host" in lost[0]
    assert "1 decisions, 0 samples and 1 step or eval records of this host are dropped" in (
        caplog.text
    )


def test_decisions_carry_the_host_that_made_them(run: Run, db_thread: ThreadPoolExecutor) -> None:
    clock = MonotonicClock()

    async def scenario() -> bool:
        reporter = make_reporter(run, db_thread, clock)
        reporter.decisions((grow(clock.now(), 4),))
        return await reporter.close()

    assert asyncio.run(scenario())
    assert list(DecisionRow.objects.filter(run=run).values_list("host", flat=True)) == [OWNER]
