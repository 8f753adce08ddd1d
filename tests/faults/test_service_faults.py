"""The services under a hosted run failing, for real: Redis stopped and started again (under
a hosted run, and under the API while runs are created and commanded over HTTP), and
PostgreSQL out of reach for 10 s behind a proxy."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest
from celery import Celery
from django.test import override_settings
from django.utils import timezone

from controlplane.runs.models import Decision, EngineSample, Override, Run, RunState, StepRecord
from controlplane.runs.services import enqueue, override_create
from tests.api.conftest import daphne_server, make_account
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


# A create sends its task once, within queue.SEND_TIMEOUT_S, and else asks the engines for
# their models: seconds at most on a busy machine (on main it answered 500 after 20 s).
CREATE_ANSWER_S = 5.0
# The outage's part of the test is about 10 s: the sweep sends the tasks the outage kept
# from being sent once their runs are lease.REQUEUE_AFTER_S (30 s) queued, plus a sweep.
TASKS_AFTER_REDIS_S = 60.0


def test_with_redis_down_a_create_answers_201_once_and_commands_are_stored_and_applied(
    tmp_path: Path, queue: str, runs_dir: Path, own_redis: OwnRedis
) -> None:
    operator = make_account("olga", "operator")
    with (
        sim_engines(tmp_path, 1) as engines,
        daphne_server(tmp_path, queue, runs_dir, REDIS_URL=own_redis.url) as server,
    ):
        api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Token {operator.token}"}, timeout=60
        )
        worker = start_worker(tmp_path, "w", queue, runs_dir, REDIS_URL=own_redis.url)
        try:
            made = api.post("/api/runs/", json=run_document(engines, max_steps=10_000))
            assert made.status_code == 201, made.text
            hosted = Run.objects.get(pk=made.json()["id"])
            wait_for(lambda: steps(hosted) >= 1, 120, "a step of the hosted run")
            own_redis.stop()

            document = run_document(engines, name="created-during-the-outage", max_steps=3)
            key = {"Idempotency-Key": str(uuid.uuid4())}
            started = time.monotonic()
            first = api.post("/api/runs/", json=document, headers=key)
            first_s = time.monotonic() - started
            assert first.status_code == 201, f"{first.status_code} after {first_s:.1f} s"
            started = time.monotonic()
            retried = api.post("/api/runs/", json=document, headers=key)
            retried_s = time.monotonic() - started
            other = api.post("/api/runs/", json={**document, "max_steps": 4}, headers=key)
            malformed = api.post("/api/runs/", json=document, headers={"Idempotency-Key": "a b"})

            pin = {"mode": "pin", "cap": 12, "ttl_s": 600, "reason": "during the outage"}
            pinned = api.post(f"/api/runs/{hosted.pk}/override/", json=pin)
            assert pinned.status_code == 202, pinned.text
            pin_decision = wait_for(
                lambda: Override.objects.get(pk=pinned.json()["id"]).decision, 15, "the pin"
            )
            paused = api.post(f"/api/runs/{hosted.pk}/pause/", json={"reason": "outage"})
            assert paused.status_code == 202, paused.text
            wait_for(lambda: state(hosted) == RunState.PAUSED, 30, "the pause")
            resumed = api.post(f"/api/runs/{hosted.pk}/resume/", json={"reason": "go on"})
            assert resumed.status_code == 202, resumed.text
            steps_paused = steps(hosted)

            own_redis.start()
            back = time.monotonic()
            created = Run.objects.get(pk=first.json()["id"])
            wait_for(
                lambda: state(created) == RunState.COMPLETED and steps(hosted) > steps_paused,
                TASKS_AFTER_REDIS_S,
                "the tasks of the run created and the run resumed during the outage",
            )
            hosted_again_s = time.monotonic() - back
            stopped = api.post(f"/api/runs/{hosted.pk}/stop/", json={"reason": "test over"})
            assert stopped.status_code == 202, stopped.text
            wait_for(lambda: state(hosted) in RunState.ended(), 60, "the stop")
        finally:
            stop_worker(worker)
    print(
        f"\nwith Redis down: create {first.status_code} in {first_s:.2f} s, retry "
        f"{retried.status_code} in {retried_s:.2f} s (replayed: "
        f"{retried.headers.get('Idempotent-Replayed')}), other body {other.status_code}, "
        f"bad key {malformed.status_code}; the runs' tasks sent {hosted_again_s:.1f} s after "
        "Redis was back"
    )
    assert first_s < CREATE_ANSWER_S
    assert (retried.status_code, retried.json()["id"]) == (201, first.json()["id"])
    assert retried.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert other.status_code == 422, other.text
    assert malformed.status_code == 400 and "Idempotency-Key" in malformed.json()["errors"]
    assert Run.objects.filter(name="created-during-the-outage").count() == 1
    assert list(StepRecord.objects.filter(run=created).values_list("step", flat=True)) == [1, 2, 3]
    assert (pin_decision.kind, pin_decision.cap_after) == ("pin", 12)
    assert Run.objects.get(pk=hosted.pk).state == RunState.CANCELLED
    records = list(StepRecord.objects.filter(run=hosted).values_list("step", flat=True))
    assert records == list(range(1, len(records) + 1))  # paused, resumed: each step once
    assert "could not count" in server.log()  # the command rate let them through
    assert "its task could not be sent" in server.log()


def state(run: Run) -> str:
    return Run.objects.values_list("state", flat=True).get(pk=run.pk)
