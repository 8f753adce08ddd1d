"""Two hosts for one run: a host that stalls past its lease (SIGSTOP, or a database
connection that hangs without a reset) while another takes the run over. The stalled host must
write nothing more once its lease could have passed on: no decision in the next host's
timeline, no step file, no step record."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.services import enqueue
from tests.faults.conftest import proxy
from tests.integration.hosting import (
    DbWorker,
    end_run,
    run_document,
    session_database_url,
    sim_engines,
    start_worker,
    step_groups,
    stop_workers,
    wait_for,
)
from workers.runtime.lease import LEASE_TTL_S, SWEEP_S

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

STALL_S = 32.0  # past the lease (20 s): the run is another host's by the time it wakes
FAILOVER_S = LEASE_TTL_S + SWEEP_S + 5.0  # the bound: a lease, a sweep, 5 s


def hosts_in_order(run: Run) -> list[str]:
    """The hosts of the run's decisions in the order they were written, runs of one merged:
    one entry per tenure, so a host that wrote after losing its lease shows up twice."""
    order: list[str] = []
    for host in Decision.objects.filter(run=run).order_by("id").values_list("host", flat=True):
        if not order or order[-1] != host:
            order.append(host)
    return order


def assert_written_once(run: Run, steps_dir: Path, group_size: int) -> None:
    on_disk = step_groups(steps_dir)
    assert sorted(on_disk) == list(range(1, max(on_disk) + 1))
    groups = [group for step in on_disk.values() for group in step]
    assert len(groups) == group_size * len(set(groups)), "a group was written in two steps"
    records = list(
        StepRecord.objects.filter(run=run).order_by("step").values_list("step", flat=True)
    )
    assert records == sorted(on_disk)
    assert not [p for p in steps_dir.iterdir() if not p.name.isdigit()]


def host_of(run: Run, first: DbWorker, second: DbWorker) -> DbWorker:
    owner = Run.objects.get(pk=run.pk).lease_owner
    return first if owner.startswith(f"{first.name}-") else second


def test_a_host_stopped_past_its_lease_writes_nothing_into_the_next_hosts_run(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    with sim_engines(tmp_path, 2) as engines:
        document = run_document(engines, max_steps=10_000)
        run = Run.objects.create(name="stalled", config=document, state=RunState.QUEUED)
        steps_dir = runs_dir / str(run.pk) / "steps"
        first = start_worker(tmp_path, "first", queue, runs_dir)
        second = None
        try:
            enqueue(run.pk)
            wait_for(lambda: StepRecord.objects.filter(run=run).count() >= 2, 120, "two steps")
            second = start_worker(tmp_path, "second", queue, runs_dir)
            os.killpg(first.process.pid, signal.SIGSTOP)
            stalled_at = time.monotonic()
            wait_for(
                lambda: Decision.objects.filter(run=run, kind="restore").exists(),
                FAILOVER_S + 10,
                "the second worker to restore the run",
            )
            failover_s = time.monotonic() - stalled_at
            time.sleep(max(0.0, STALL_S - (time.monotonic() - stalled_at)))
            os.killpg(first.process.pid, signal.SIGCONT)
            time.sleep(5.0)  # the woken host's reporter and heartbeat have run by now
            steps_now = StepRecord.objects.filter(run=run).count()
            wait_for(
                lambda: StepRecord.objects.filter(run=run).count() >= steps_now + 2,
                60,
                "the second worker to go on",
            )
            end_run(run)
        finally:
            stop_workers(first, second)
    order = hosts_in_order(run)
    assert len(order) == 2 and order[0].startswith("first-") and order[1].startswith("second-"), (
        order
    )
    assert failover_s <= FAILOVER_S + 2, failover_s
    assert_written_once(run, steps_dir, group_size=4)
    assert "FileExistsError" not in second.log() and "FileNotFoundError" not in first.log()


def test_a_host_whose_database_hangs_stops_by_its_own_deadline_and_another_takes_over(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    with sim_engines(tmp_path, 2) as engines, proxy("hold", "127.0.0.1:5432", tmp_path) as db:
        document = run_document(engines, max_steps=10_000)
        run = Run.objects.create(name="hung-db", config=document, state=RunState.QUEUED)
        steps_dir = runs_dir / str(run.pk) / "steps"
        proxied = session_database_url(port=db.port)
        first = start_worker(tmp_path, "first", queue, runs_dir, DATABASE_URL=proxied)
        second = None
        try:
            enqueue(run.pk)
            wait_for(lambda: StepRecord.objects.filter(run=run).count() >= 2, 120, "two steps")
            second = start_worker(tmp_path, "second", queue, runs_dir)
            db.break_()
            hung_at = time.monotonic()
            wait_for(
                lambda: "the lease could not be renewed in time" in first.log(),
                LEASE_TTL_S,
                "the hung host to stop by its own deadline",
            )
            stopped_s = time.monotonic() - hung_at
            on_disk_at_stop = set(step_groups(steps_dir))
            wait_for(
                lambda: Decision.objects.filter(run=run, kind="restore").exists(),
                FAILOVER_S + 10,
                "the second worker to restore the run",
            )
            failover_s = time.monotonic() - hung_at
            assert set(step_groups(steps_dir)) == on_disk_at_stop  # nobody wrote in between
            assert host_of(run, first, second) is second
            db.mend()  # what the hung host sent meanwhile reaches the database now
            steps_now = StepRecord.objects.filter(run=run).count()
            wait_for(
                lambda: StepRecord.objects.filter(run=run).count() >= steps_now + 3,
                60,
                "the second worker to go on",
            )
            end_run(run)
        finally:
            db.mend()
            stop_workers(first, second)
    assert stopped_s < LEASE_TTL_S, stopped_s
    assert failover_s <= FAILOVER_S, failover_s
    order = hosts_in_order(run)
    assert len(order) == 2 and order[1].startswith("second-"), order
    assert_written_once(run, steps_dir, group_size=4)
    assert "FileExistsError" not in second.log() and "FileNotFoundError" not in first.log()


def test_runs_of_a_host_whose_database_hangs_go_to_a_healthy_worker_not_back_to_it(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """The hung worker stays alive and consuming: a run sent to the shared queue could go
    back to it. Every run must reach the healthy worker within a lease and a sweep."""
    count = 4
    with sim_engines(tmp_path, 2) as engines, proxy("hold", "127.0.0.1:5432", tmp_path) as db:
        runs = [
            Run.objects.create(
                name=f"hung-db-{i}",
                config=run_document(engines, max_steps=10_000),
                state=RunState.QUEUED,
            )
            for i in range(count)
        ]
        proxied = session_database_url(port=db.port)
        sick = start_worker(
            tmp_path, "sick", queue, runs_dir, concurrency=2 * count, DATABASE_URL=proxied
        )
        healthy = None
        try:
            for run in runs:
                enqueue(run.pk)
            wait_for(
                lambda: all(StepRecord.objects.filter(run=run).exists() for run in runs),
                120,
                "a step of every run",
            )
            healthy = start_worker(tmp_path, "healthy", queue, runs_dir, concurrency=2 * count)
            db.break_()
            hung_at = time.monotonic()

            def moved() -> bool:
                owners = Run.objects.filter(pk__in=[r.pk for r in runs]).values_list(
                    "lease_owner", flat=True
                )
                return all(owner.startswith("healthy-") for owner in owners)

            wait_for(moved, FAILOVER_S + 2, "every run to be hosted by the healthy worker")
            failover_s = time.monotonic() - hung_at
            db.mend()
            for run in runs:
                end_run(run)
        finally:
            db.mend()
            stop_workers(sick, healthy)
    assert failover_s <= FAILOVER_S, failover_s
    for run in runs:
        assert_written_once(run, runs_dir / str(run.pk) / "steps", group_size=4)
