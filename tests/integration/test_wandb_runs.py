"""W&B with several runs in one worker process: two runs hosted by one real Celery worker
(its thread pool), W&B offline, the shorter started second and ending first. Each must log
into a W&B run of its own, in its own folder, and the longer must go on to its last step."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from wandb.proto import wandb_internal_pb2

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.services import enqueue
from tests.integration.hosting import run_document, sim_engines, start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The .wandb file is W&B's LevelDB-style log: a 7-byte header, then records in 32 KiB blocks,
# each with a 7-byte header (checksum, length, type: full, or first/middle/last of a split).
BLOCK = 32768
HEADER = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, parts = 7, b""
    while pos + HEADER.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER.size:
            pos += left  # a block's tail too short for a header is padding
            continue
        _, length, kind = HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:
            pos += left
            continue
        body = data[pos + HEADER.size : pos + HEADER.size + length]
        pos += HEADER.size + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            parts = body
        elif kind == MIDDLE:
            parts += body
        elif kind == LAST:
            yield parts + body


def logged_steps(run_dir: Path) -> tuple[list[Path], list[int]]:
    """The W&B run folders under a run's folder, and the history steps of them all."""
    folders = sorted((run_dir / "wandb").glob("offline-run-*"))
    steps = []
    for folder in folders:
        for file in folder.glob("run-*.wandb"):
            for body in wandb_records(file):
                record = wandb_internal_pb2.Record()
                record.ParseFromString(body)
                if record.WhichOneof("record_type") == "history":
                    steps.append(record.history.step.num)
    return folders, steps


def test_two_runs_in_one_worker_each_log_to_their_own_wandb_run_and_both_complete(
    tmp_path: Path, queue: str
) -> None:
    runs_dir = tmp_path / "runs"
    with sim_engines(tmp_path, 1) as engines:
        long_steps, short_steps = 15, 3
        made = {}
        for name, max_steps in (("long", long_steps), ("short", short_steps)):
            document = run_document(engines, name=name, max_steps=max_steps)
            document["wandb"] = {"mode": "offline"}
            made[name] = Run.objects.create(name=name, config=document, state=RunState.QUEUED)
        long, short = made["long"], made["short"]
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(long.pk)
            wait_for(lambda: StepRecord.objects.filter(run=long).exists(), 120, "a first step")
            enqueue(short.pk)
            wait_for(
                lambda: Run.objects.get(pk=short.pk).state in RunState.ended(), 120, "short's end"
            )
            short_ended_at_long_step = StepRecord.objects.filter(run=long).count()
            wait_for(
                lambda: Run.objects.get(pk=long.pk).state in RunState.ended(), 120, "long's end"
            )
        finally:
            stop_worker(worker)
        log = worker.log()
    for run in (long, short):
        run.refresh_from_db()
        assert (run.state, run.error) == (RunState.COMPLETED, ""), (run.name, run.error)
    assert short_ended_at_long_step < long_steps  # the short run ended while the long went on
    restores = Decision.objects.filter(run__in=(long, short), kind="restore").count()
    assert restores == 0  # each hosted once: no crash, no second host
    assert "UsageError" not in log and "less than the current step" not in log, log[-3000:]
    long_folders, long_logged = logged_steps(runs_dir / str(long.pk))
    short_folders, short_logged = logged_steps(runs_dir / str(short.pk))
    assert len(long_folders) == 1 and len(short_folders) == 1, (long_folders, short_folders)
    # Step 0 holds the decisions logged before the first step (the start cap).
    assert long_logged == list(range(long_steps + 1))
    assert short_logged == list(range(short_steps + 1))
    print(
        f"\ntwo runs in one worker: short ended after its {short_steps} steps while long was at "
        f"step {short_ended_at_long_step}; long completed its {long_steps}; W&B runs "
        f"{long_folders[0].name} (steps {long_logged[1]}..{long_logged[-1]}) and "
        f"{short_folders[0].name} (steps {short_logged[1]}..{short_logged[-1]})"
    )
