"""Where a run writes its batches: always a folder under PACER_RUNS_DIR ending in the run's id,
so a config cannot send them elsewhere on the worker's disk, and no two runs share a folder
(a run pointed at another's folder adopted its steps through step recovery)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.services import enqueue
from tests.api.conftest import make_account
from tests.integration.hosting import (
    SimEngine,
    run_document,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with sim_engines(tmp_path_factory.mktemp("sims"), 1) as started:
        yield started


@pytest.fixture
def operator() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {make_account('olga', 'operator').token}")
    return client


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        ("/tmp/pacer-elsewhere", "inside PACER_RUNS_DIR"),
        ("../elsewhere", "inside PACER_RUNS_DIR"),
        ("team/../../elsewhere", "inside PACER_RUNS_DIR"),
        ("7", "a run's folder"),
        ("team/12/x", "a run's folder"),
    ],
)
def test_an_output_folder_outside_the_runs_folder_or_like_a_runs_is_refused(
    operator: APIClient, engines: list[SimEngine], settings: object, folder: str, said: str
) -> None:
    document = run_document(engines, output={"dir": folder})
    response = operator.post("/api/runs/", document, format="json")
    assert response.status_code == 400, response.content
    assert said in " ".join(response.json()["errors"]["output.dir"])
    assert not Run.objects.exists()


def test_two_runs_given_one_folder_each_write_a_folder_of_their_own_under_it(
    operator: APIClient, engines: list[SimEngine], queue: str, tmp_path: Path, settings: object
) -> None:
    runs_dir = tmp_path / "runs"
    settings.PACER_RUNS_DIR = runs_dir  # type: ignore[attr-defined]
    document = run_document(engines, max_steps=3, output={"dir": "team-a/sweep"})
    ids = []
    for _ in range(2):
        created = operator.post("/api/runs/", document, format="json")
        assert created.status_code == 201, created.content
        ids.append(created.json()["id"])
    worker = start_worker(tmp_path, "folders", queue, runs_dir)
    try:
        for run_id in ids:
            enqueue(run_id)
        for run_id in ids:
            wait_for(
                lambda r=run_id: Run.objects.get(pk=r).state in RunState.ended(), 180, "the runs"
            )
    finally:
        stop_worker(worker)
    for run_id in ids:
        run = Run.objects.get(pk=run_id)
        folder = runs_dir / "team-a" / "sweep" / str(run_id)
        assert run.state == RunState.COMPLETED, run.error
        assert Path(run.output_dir) == folder
        assert sorted(p.name for p in (folder / "steps").iterdir()) == [
            "000001",
            "000002",
            "000003",
        ]
        assert [r.step for r in StepRecord.objects.filter(run=run)] == [1, 2, 3]
        kinds = {d.kind for d in Decision.objects.filter(run=run)}
        assert "bootstrap" in kinds and "restore" not in kinds  # nothing adopted
    assert not (runs_dir / "team-a" / "sweep" / "steps").exists()
