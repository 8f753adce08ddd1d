"""Engines failing under a hosted run, for real: a simulator process killed and started
again on its port, and an engine whose /metrics hangs behind a proxy."""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Sum
from django.utils import timezone

from controlplane.runs.models import Decision, EngineSample, Run, RunState, StepRecord
from controlplane.runs.services import enqueue, override_create
from inference.metrics.client import ScrapeConfig
from tests.faults.conftest import proxy
from tests.integration.hosting import (
    run_document,
    sim_engines,
    start_sim,
    start_worker,
    stop_worker,
    wait_for,
    wait_healthy,
)

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

SCRAPE_LIMIT_S = ScrapeConfig().total_s  # a hanging /metrics costs its engine this much


def steps(run: Run) -> int:
    return StepRecord.objects.filter(run=run).count()


def engines_of_step(run_dir: Path, step: int) -> set[str]:
    lines = (run_dir / "steps" / f"{step:06d}" / "samples.jsonl").read_text().splitlines()
    return {json.loads(line)["engine"] for line in lines}


def stop_run(run: Run) -> None:
    run.refresh_from_db()
    override_create(run=run, created_by=None, mode="stop", reason="test over")
    wait_for(lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 60, "the run to stop")


def test_a_killed_engine_is_down_within_a_poll_and_used_again_once_back(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    with sim_engines(tmp_path, 2) as engines:
        document = run_document(engines, max_steps=10_000)
        run = Run.objects.create(name="engine-killed", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            wait_for(lambda: steps(run) >= 2, 120, "two steps")
            victim = engines[1]
            name = victim.url.removeprefix("http://")
            killed_at = timezone.now()
            os.killpg(victim.process.pid, signal.SIGKILL)
            victim.process.wait()
            at_kill = steps(run)
            after = wait_for(
                lambda: (
                    EngineSample.objects.filter(
                        run=run, engine_id__startswith=name, at__gt=killed_at
                    )
                    .order_by("at")
                    .first()
                ),
                10,
                "a poll after the kill",
            )
            assert after.health == "down"  # on the first poll after the kill
            wait_for(lambda: steps(run) >= at_kill + 4, 120, "steps without the engine")
            failed = StepRecord.objects.filter(run=run, step__gt=at_kill).aggregate(Sum("failed"))
            assert failed["failed__sum"] > 0  # its in-flight episodes ended as errors
            later = range(at_kill + 2, steps(run) + 1)
            run_dir = runs_dir / str(run.pk)
            assert all(
                engines_of_step(run_dir, step) == {engines[0].url.removeprefix("http://")}
                for step in later
            )
            back = start_sim(tmp_path / "sim-1-again.log", int(name.rsplit(":", 1)[1]), 7)
            engines[1] = back
            wait_healthy(back)
            restarted_at = timezone.now()
            wait_for(
                lambda: EngineSample.objects.filter(
                    run=run, engine_id__startswith=name, at__gt=restarted_at, health="up"
                ).exists(),
                90,  # the dead engine is retried with backoff: at most 11 polls apart
                "the engine to be seen again",
            )
            seen_at = steps(run)
            wait_for(
                lambda: any(
                    name in engines_of_step(run_dir, step)
                    for step in range(seen_at + 1, steps(run) + 1)
                ),
                120,
                "a step with episodes from the engine that came back",
            )
            stop_run(run)
        finally:
            stop_worker(worker)
    assert Run.objects.get(pk=run.pk).state == RunState.CANCELLED


def test_an_engine_whose_metrics_hang_turns_stale_and_holds_growth_until_it_answers(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    with sim_engines(tmp_path, 2) as engines, proxy("metrics", engines[1].url, tmp_path) as hang:
        document = run_document(engines, max_steps=10_000)
        hidden = f"127.0.0.1:{hang.port}"
        document["engine"][1] = {"url": f"http://{hidden}"}
        document["concurrency"]["poll_ttl"] = 5.0
        run = Run.objects.create(name="metrics-hang", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            wait_for(lambda: Decision.objects.filter(run=run, kind="grow").exists(), 120, "growth")
            hung_at = timezone.now()
            hang.break_()
            stale = wait_for(
                lambda: EngineSample.objects.filter(
                    run=run, engine_id__startswith=hidden, at__gt=hung_at
                ).first(),
                20,
                "a poll of the hanging engine",
            )
            assert stale.health == "stale"  # the first poll after the hang: its scrape gave up
            freeze = wait_for(
                lambda: Decision.objects.filter(
                    run=run, kind="stale-freeze", at__gt=hung_at
                ).first(),
                30,
                "the stale-freeze alert",
            )
            held_until = timezone.now()
            fresh = EngineSample.objects.filter(run=run, at__gt=hung_at).exclude(
                engine_id__startswith=hidden
            )
            assert fresh.exists() and set(fresh.values_list("health", flat=True)) == {"up"}
            # Growth made before the stale poll arrived is recorded with it (one record a
            # poll), a scrape's limit after the poll began; none is made after it.
            read = stale.at + timedelta(seconds=SCRAPE_LIMIT_S + 1.0)
            assert not Decision.objects.filter(
                run=run, kind="grow", at__gt=read, at__lt=held_until
            ).exists()
            hang.mend()
            thaw = wait_for(
                lambda: Decision.objects.filter(
                    run=run, kind="stale-thaw", at__gt=freeze.at
                ).first(),
                60,
                "the thaw once it answers",
            )
            stop_run(run)
        finally:
            stop_worker(worker)
    begun = (stale.at - hung_at).total_seconds()
    print(
        f"\n/metrics hung: the first poll after it (begun {begun:.1f} s later) read the engine "
        f"stale once its scrape gave up ({SCRAPE_LIMIT_S:g} s); stale-freeze alert "
        f"{(freeze.at - hung_at).total_seconds():.1f} s after the hang, thaw "
        f"{(thaw.at - hung_at).total_seconds():.1f} s after it began"
    )
    assert freeze.alert
