"""A worker killed at the worst moments, a second worker taking over: in the middle of writing
a step's batch, and in the middle of a drain after a cut."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.services import enqueue
from tests.integration.hosting import (
    decisions_of,
    end_run,
    kill_worker,
    run_document,
    sim_engines,
    start_worker,
    step_groups,
    stop_worker,
    wait_for,
)

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

WATCH_S = 0.0005  # how often the steps folder is looked at for a write in progress
# A cache of ~6 long contexts per engine: a pool past it preempts, and the policy cuts.
SMALL_KV = ("--kv-tokens", "12000", "--max-model-len", "8192")


def test_a_worker_killed_while_writing_a_batch_leaves_no_half_step_and_none_twice(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    with sim_engines(tmp_path, 2) as engines:
        document = run_document(engines, max_steps=10_000, batch_size=64, group_size=8)
        run = Run.objects.create(name="kill-in-write", config=document, state=RunState.QUEUED)
        steps_dir = runs_dir / str(run.pk) / "steps"
        first = start_worker(tmp_path, "first", queue, runs_dir)
        second = start_worker(tmp_path, "second", queue, runs_dir)
        try:
            enqueue(run.pk)
            wait_for(lambda: StepRecord.objects.filter(run=run).count() >= 1, 120, "a step")
            owner = Run.objects.get(pk=run.pk).lease_owner
            host = first if owner.startswith("first-") else second
            deadline = time.monotonic() + 120
            while not any(p.name.startswith(".partial-") for p in steps_dir.iterdir()):
                assert time.monotonic() < deadline, "no batch write was caught in progress"
                time.sleep(WATCH_S)
            kill_worker(host)
            killed_during = max(step_groups(steps_dir), default=0) + 1
            wait_for(
                lambda: StepRecord.objects.filter(run=run, step=killed_during + 2).exists(),
                120,
                "the other worker to write past the step it was killed in",
            )
            end_run(run)
        finally:
            for worker in (first, second):
                if worker.process.poll() is None:
                    stop_worker(worker)
    on_disk = step_groups(steps_dir)
    assert sorted(on_disk) == list(range(1, max(on_disk) + 1))  # no step lost
    groups = [group for step in on_disk.values() for group in step]
    assert len(groups) == 8 * len(set(groups))  # no group in two steps: none written twice
    assert not [p for p in steps_dir.iterdir() if not p.name.isdigit()]  # no half step left
    assert Decision.objects.filter(run=run, kind="restore").count() == 1


def test_a_worker_killed_during_a_drain_resumes_holding_it_and_cuts_no_more(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    with sim_engines(tmp_path, 2, *SMALL_KV) as engines:
        document = run_document(engines, max_steps=10_000)
        # Far past the cache, the reference cuts on its first preemption (pacer would hold
        # the pool on trial, and cuts only where no measurement excuses a preemption). It
        # never trims on KV usage here: a trim ahead of the cache leaves the cut to luck, and
        # on a loaded machine none came in two minutes.
        never = {"trim_kv_usage": 1.0, "trim_target_usage": 1.0, "shed_kv_usage": 1.0}
        document["concurrency"] |= {
            "policy": "reference",
            "initial_inflight": 64,
            "reference": never,
        }
        document["env"][0]["args"] = {"turns": 3, "prompt_tokens": 512, "observation_tokens": 256}
        run = Run.objects.create(name="kill-in-drain", config=document, state=RunState.QUEUED)
        first = start_worker(tmp_path, "first", queue, runs_dir)
        second = start_worker(tmp_path, "second", queue, runs_dir)
        try:
            enqueue(run.pk)
            # A drain lasts a poll or a few: catch the one stored with the latch set, and kill
            # its host before the next poll can release it.
            stored = wait_for(
                lambda: (
                    (Run.objects.get(pk=run.pk).controller_state or {}).get("draining")
                    and Run.objects.get(pk=run.pk)
                ),
                120,
                "a drain stored after a cut",
                every=0.02,
                explain=lambda: decisions_of(run),
            )
            host = first if stored.lease_owner.startswith("first-") else second
            kill_worker(host)
            draining = stored.controller_state["draining"]
            cut = Decision.objects.filter(run=run, kind="cut").first()
            restore = wait_for(
                lambda: Decision.objects.filter(run=run, kind="restore").first(),
                60,
                "the restore on the second worker",
                explain=lambda: decisions_of(run),
            )
            wait_for(
                lambda: Decision.objects.filter(
                    run=run, kind="drain-release", at__gt=restore.at
                ).exists(),
                120,
                "the drain to release after the restore",
                explain=lambda: decisions_of(run),
            )
            end_run(run)
        finally:
            for worker in (first, second):
                if worker.process.poll() is None:
                    stop_worker(worker)
    after = list(Decision.objects.filter(run=run, at__gt=restore.at).values_list("kind", flat=True))
    assert draining is True and cut is not None  # killed with the cut's latch stored...
    assert "bootstrap" not in after
    assert after.index("drain-release") < (after.index("cut") if "cut" in after else len(after))
