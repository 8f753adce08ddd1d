"""An error no part of a hosted run handles (here: an output folder that cannot be made)
ends the run failed with that error as its reason after a few hostings, instead of hosting
it again forever; an error that passes costs the run nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.runs.models import Run, RunState, StepRecord
from controlplane.runs.services import enqueue
from tests.integration.hosting import run_document, sim_engines, start_worker, stop_worker, wait_for
from workers.runtime.host import HOST_ATTEMPTS, HOST_RETRY_S
from workers.runtime.lease import LEASE_TTL_S

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


def test_a_run_whose_hosting_keeps_failing_ends_failed_with_the_error(
    tmp_path: Path, queue: str
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the runs folder's parent should be")
    runs_dir = blocker / "runs"  # every mkdir under it: NotADirectoryError
    with sim_engines(tmp_path, 1) as engines:
        run = Run.objects.create(
            name="unhostable", config=run_document(engines), state=RunState.QUEUED
        )
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            budget = HOST_ATTEMPTS * (HOST_RETRY_S + 10.0) + LEASE_TTL_S
            wait_for(
                lambda: Run.objects.get(pk=run.pk).state in RunState.ended(),
                budget,
                "the run to end",
            )
        finally:
            stop_worker(worker)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert run.error.startswith(f"hosting failed {HOST_ATTEMPTS} times in a row")
    assert "NotADirectoryError" in run.error
    assert run.lease_owner == "" and run.finished_at is not None


def test_an_error_that_passes_is_hosted_again_and_the_run_goes_on(
    tmp_path: Path, queue: str
) -> None:
    blocker = tmp_path / "briefly-not-a-folder"
    blocker.write_text("removed after the first failed hosting")
    runs_dir = blocker / "runs"
    with sim_engines(tmp_path, 1) as engines:
        run = Run.objects.create(name="flaky", config=run_document(engines), state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            wait_for(lambda: Run.objects.get(pk=run.pk).host_failures == 1, 60, "a failure")
            blocker.unlink()
            wait_for(
                lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 120, "the run to end"
            )
        finally:
            stop_worker(worker)
    run.refresh_from_db()
    assert run.state == RunState.COMPLETED, run.error
    assert run.host_failures == 0  # a step written starts the count afresh
    assert StepRecord.objects.filter(run=run).count() == run_document([])["max_steps"]
