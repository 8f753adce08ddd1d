"""The services under a hosted run failing, for real: Redis stopped and started again, and
PostgreSQL out of reach for 10 s behind a proxy."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from celery import Celery
from django.test import override_settings
from django.utils import timezone

from controlplane.runs.models import Decision, EngineSample, Override, Run, RunState, StepRecord
from controlplane.runs.services import enqueue, override_create
from tests.faults.conftest import OwnRedis, proxy
from tests.integration.hosting import (
    run_document,
    session_database_url,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

OUTAGE_S = 10.0


def steps(run: Run) -> int:
    return StepRecord.objects.filter(run=run).count()


def pin(run: Run, cap: int) -> Override:
    run.refresh_from_db()
    return override_create(run=run, created_by=None, mode="pin", cap=cap, ttl_s=600.0)


def test_a_run_rides_out_a_redis_restart_and_applies_commands_sent_meanwhile(
    tmp_path: Path, queue: str, runs_dir: Path, own_redis: OwnRedis
) -> None:
    sender = Celery(broker=own_redis.url, backend=own_redis.url)
    with (
        sim_engines(tmp_path, 2) as engines,
        override_settings(REDIS_URL=own_redis.url),  # where the web side publishes commands
    ):
        document = run_document(engines, max_steps=10_000)
        run = Run.objects.create(name="redis-restart", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir, REDIS_URL=own_redis.url)
        try:
            sender.send_task("workers.run_execute", args=[run.pk], queue=queue)
            wait_for(lambda: steps(run) >= 2, 120, "two steps")
            own_redis.stop()
            during = pin(run, 12)  # stored; its wake-up cannot be published
            applied = wait_for(
                lambda: Override.objects.get(pk=during.pk).decision, 15, "the pin sent during it"
            )
            before = steps(run)
            time.sleep(3.0)
            own_redis.start()
            restarted_at = timezone.now()
            wait_for(lambda: steps(run) >= before + 2, 120, "steps after the restart")
            after = pin(run, 14)
            answered = wait_for(lambda: Override.objects.get(pk=after.pk).decision, 10, "a pin")
            assert (
                sender.send_task("workers.ping", args=["back"], queue=queue).get(timeout=30)[
                    "token"
                ]
                == "back"
            )  # the worker reconnected to the broker
            run.refresh_from_db()
            override_create(run=run, created_by=None, mode="stop", reason="test over")
            wait_for(lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 60, "a stop")
        finally:
            stop_worker(worker)
    assert (applied.kind, applied.cap_after) == ("pin", 12)
    assert (answered.kind, answered.cap_after) == ("pin", 14)
    assert Run.objects.get(pk=run.pk).state == RunState.CANCELLED
    assert EngineSample.objects.filter(run=run, at__gt=restarted_at).exists()
    assert not Decision.objects.filter(run=run, kind="restore").exists()  # one host throughout


def test_a_run_rides_out_the_database_away_for_10_s_and_loses_no_record(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    with sim_engines(tmp_path, 2) as engines, proxy("tcp", "127.0.0.1:5432", tmp_path) as db:
        document = run_document(engines, max_steps=10_000)
        run = Run.objects.create(name="database-away", config=document, state=RunState.QUEUED)
        proxied = session_database_url(port=db.port)
        worker = start_worker(tmp_path, "w", queue, runs_dir, DATABASE_URL=proxied)
        steps_dir = runs_dir / str(run.pk) / "steps"
        try:
            enqueue(run.pk)
            wait_for(lambda: steps(run) >= 2, 120, "two steps")
            on_disk_before = len(list(steps_dir.iterdir()))
            away_from = timezone.now()
            db.break_()
            time.sleep(OUTAGE_S)
            on_disk_during = len(list(steps_dir.iterdir()))
            db.mend()
            back_at = timezone.now()
            wait_for(
                lambda: steps(run) >= len(list(steps_dir.iterdir())) >= on_disk_during,
                60,
                "the records of the steps written meanwhile",
            )
            run.refresh_from_db()
            override_create(run=run, created_by=None, mode="stop", reason="test over")
            wait_for(lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 60, "a stop")
        finally:
            stop_worker(worker)
    assert on_disk_during > on_disk_before  # the run went on without its database
    polls_away = EngineSample.objects.filter(run=run, at__gte=away_from, at__lte=back_at)
    assert polls_away.count() >= 2 * int(OUTAGE_S / 0.5) * 0.8  # buffered, written after
    records = list(StepRecord.objects.filter(run=run).values_list("step", flat=True))
    assert records == list(range(1, len(records) + 1))
    assert Run.objects.get(pk=run.pk).state == RunState.CANCELLED
    assert not Decision.objects.filter(run=run, kind="restore").exists()  # it kept its lease
    assert "refused" in worker.log()  # the reporter said it kept the rows for later
