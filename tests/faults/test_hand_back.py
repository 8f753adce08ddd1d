"""A stop or a pause that arrives while a worker is handing its run back (SIGTERM, with the
step under way still being written on a slow disk) ends the run as it asks: the command is
never marked applied while the run goes back to the queue and runs on elsewhere."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from controlplane.runs.models import Run, RunState, StepRecord
from controlplane.runs.services import enqueue, override_create
from tests.integration.hosting import run_document, sim_engines, start_worker, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

SHIM = Path(__file__).with_name("slow_fsync.c")
SLOW_FSYNC_MS = 1500  # a step's write syncs four times: about 6 s per step
WATCH_S = 0.005


def slow_disk(folder: Path) -> Path:
    """The LD_PRELOAD shim that makes every fsync of a process slow, built here."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "the hand-back fault test builds a shim with a C compiler (cc or gcc)"
    library = folder / "slow_fsync.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(SHIM), "-ldl"], check=True
    )
    return library


@pytest.mark.parametrize(
    ("mode", "ended_as"), [("stop", RunState.CANCELLED), ("pause", RunState.PAUSED)]
)
def test_a_command_posted_during_a_hand_back_ends_the_run_as_it_asks(
    tmp_path: Path, queue: str, runs_dir: Path, mode: str, ended_as: RunState
) -> None:
    shim = slow_disk(tmp_path)
    with sim_engines(tmp_path, 2) as engines:
        run = Run.objects.create(
            name="hand-back", config=run_document(engines, max_steps=10_000), state=RunState.QUEUED
        )
        steps_dir = runs_dir / str(run.pk) / "steps"
        worker = start_worker(
            tmp_path,
            "slow",
            queue,
            runs_dir,
            LD_PRELOAD=str(shim),
            PACER_SLOW_FSYNC_MS=str(SLOW_FSYNC_MS),
        )
        try:
            enqueue(run.pk)
            wait_for(lambda: StepRecord.objects.filter(run=run).exists(), 120, "a step")
            wait_for(
                lambda: any(p.name.startswith(".partial-") for p in steps_dir.iterdir()),
                60,
                "a batch write in progress",
                every=WATCH_S,
            )
            os.killpg(worker.process.pid, signal.SIGTERM)
            time.sleep(1.0)  # the host has heard of the shutdown; its step is being written
            run.refresh_from_db()
            command = override_create(run=run, created_by=None, mode=mode, reason="hand-back")
            worker.process.wait(timeout=60)
        finally:
            if worker.process.poll() is None:
                os.killpg(worker.process.pid, signal.SIGKILL)
    run.refresh_from_db()
    assert run.state == ended_as, (run.state, worker.log()[-2000:])
    assert run.lease_owner == ""
    command.refresh_from_db()
    assert command.applied_at is not None and command.error == ""
