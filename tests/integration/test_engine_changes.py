"""Engines added to a hosted run and taken out of it, through the API, with a real Celery
worker, real simulator processes and the run's records: the joining engine takes groups at
once and the cap is rescaled for its KV; the leaving one gets no new group, drains within
its deadline, and is polled no more."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from rest_framework.test import APIClient

from controlplane.runs.models import Decision, EngineSample, Override, Run, RunState
from controlplane.runs.services import enqueue, override_create
from tests.api.conftest import make_account
from tests.integration.hosting import (
    SimEngine,
    run_document,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with sim_engines(tmp_path_factory.mktemp("sims"), 3) as started:
        yield started


def name_of(engine: SimEngine) -> str:
    return urlsplit(engine.url).netloc


def decision(run: Run, kind: str, engine: str = "", cause: str = "") -> Decision | None:
    found = Decision.objects.filter(run=run, kind=kind)
    if engine:
        found = found.filter(engine=engine)
    if cause:
        found = found.filter(cause=cause)
    return found.order_by("at", "id").last()


def test_an_engine_joins_a_hosted_run_and_another_drains_out_of_it(
    engines: list[SimEngine], queue: str, runs_dir: Path, tmp_path: Path
) -> None:
    first, second, joining = engines
    document = run_document([first, second], max_steps=1000)
    document["concurrency"]["initial_inflight"] = 16
    run = Run.objects.create(name="pool", config=document, state=RunState.QUEUED)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {make_account('ops', 'operator').token}")
    worker = start_worker(tmp_path, "pool", queue, runs_dir)
    try:
        enqueue(run.pk)
        wait_for(lambda: decision(run, "bootstrap"), 60, "the run's start")

        added = api.post(f"/api/runs/{run.pk}/engines/", {"engine": joining.url}, format="json")
        assert added.status_code == 202, added.content
        join = wait_for(lambda: Override.objects.get(pk=added.json()["id"]).decision, 15, "join")
        assert (join.kind, join.engine) == ("engine-join", name_of(joining))
        wait_for(
            lambda: EngineSample.objects.filter(
                run=run, engine_id__startswith=name_of(joining), inflight_train__gt=0
            ).exists(),
            30,
            "episodes on the joining engine",
        )
        rescale = wait_for(lambda: decision(run, "rescale", cause="engine joined"), 30, "rescale")
        assert f"{name_of(joining)} joined: KV" in rescale.reason
        assert rescale.cap_after > rescale.cap_before
        listed = api.get(f"/api/runs/{run.pk}/engines/").json()
        assert [row["name"] for row in listed] == [name_of(e) for e in engines]

        leaving = name_of(first)
        removed = api.post(
            f"/api/runs/{run.pk}/engines/{leaving}/remove/", {"drain_s": 10}, format="json"
        )
        assert removed.status_code == 202, removed.content
        drain = wait_for(
            lambda: Override.objects.get(pk=removed.json()["id"]).decision, 15, "drain"
        )
        assert (drain.kind, drain.engine) == ("engine-drain", leaving)
        shrunk = wait_for(lambda: decision(run, "rescale", cause="engine left"), 30, "rescale")
        assert shrunk.cap_after < shrunk.cap_before
        left = wait_for(lambda: decision(run, "engine-leave", engine=leaving), 30, "its leave")
        assert left.at - drain.at <= timedelta(seconds=12)
        assert "left the run" in left.reason
        polled = EngineSample.objects.filter(run=run, engine_id__startswith=leaving)
        last_sample = polled.order_by("at").last()
        assert last_sample is not None and last_sample.at <= left.at
        new_groups = polled.filter(at__gt=drain.at, inflight_train__gt=0).order_by("at")
        counts = [s.inflight_train for s in new_groups]
        assert counts == sorted(counts, reverse=True)  # it only drained: nothing new went to it
        assert [row["name"] for row in api.get(f"/api/runs/{run.pk}/engines/").json()] == [
            name_of(second),
            name_of(joining),
        ]
        assert Run.objects.get(pk=run.pk).state == RunState.RUNNING
        for shown in (join, rescale, drain, shrunk, left):
            print(f"\n{shown.kind}: {shown.reason}", end="")
        run.refresh_from_db()
        override_create(run=run, created_by=None, mode="stop", reason="done")
        wait_for(lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 60, "the stop")
    finally:
        stop_worker(worker)
    assert Run.objects.get(pk=run.pk).state == RunState.CANCELLED
