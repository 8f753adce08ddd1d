"""What a restored run carries over from the host before it: steps written but not recorded,
evaluation waves in flight, a pin's remaining time, the step its decisions are filed under;
and a run told to pause before it starts stopping at once."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.runs.models import (
    Decision,
    EvalRecord,
    Override,
    Run,
    RunState,
    StepRecord,
)
from controlplane.runs.services import enqueue, override_create
from tests.faults.conftest import proxy
from tests.integration.hosting import (
    end_run,
    kill_worker,
    run_document,
    session_database_url,
    sim_engines,
    start_worker,
    stop_workers,
    wait_for,
)
from workers.runtime import store

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

# The task's delivery, the engines' preflight and the host's start take 0.2 s here (2.5 s for
# a worker's first run, which imports the runtime: not timed); a helper task that ignored its
# cancellation held the host for BACKGROUND_STOP_S (10 s) more.
PAUSED_WITHIN_S = 3.0
PAUSED_RUNS = 5  # the first a warm-up
# Longer than a dead host's run takes to find its next (the 20 s lease, a sweep, a start),
# so the pin outlives the kill; it lapses within a poll (0.5 s) of its time, a restore's
# wall-clock reading and the sweep's timing adding a second or two.
PIN_TTL_S = 40.0
LAPSE_SLACK_S = 4.0
# Eval episodes of three turns with 3 s of tool latency between them: a wave lasts 6 s and
# more, so the first is still running when the second (the final one) starts.
EVAL_ENV = {
    "name": "multiturn",
    "kind": "eval",
    "episodes": 4,
    "args": {"turns": 3, "prompt_tokens": 64, "observation_tokens": 32, "latency_s": 3.0},
    "sampling": {"max_tokens": 32},
}


def steps_on_disk(steps_dir: Path) -> set[int]:
    return (
        {int(p.name) for p in steps_dir.iterdir() if p.name.isdigit()}
        if steps_dir.exists()
        else set()
    )


def recorded(run: Run) -> set[int]:
    return set(StepRecord.objects.filter(run=run).values_list("step", flat=True))


def test_steps_written_but_not_recorded_at_a_kill_are_recorded_from_their_reports(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """The database out of the first host's reach (a proxy that drops it) while it writes two
    steps' files, then SIGKILL: the next host records those steps with their own figures."""
    with sim_engines(tmp_path, 2) as engines, proxy("tcp", "127.0.0.1:5432", tmp_path) as db:
        run = Run.objects.create(
            name="kill-before-record",
            config=run_document(engines, max_steps=10_000),
            state=RunState.QUEUED,
        )
        steps_dir = runs_dir / str(run.pk) / "steps"
        first = start_worker(
            tmp_path, "first", queue, runs_dir, DATABASE_URL=session_database_url(port=db.port)
        )
        workers = [first]
        try:
            enqueue(run.pk)
            wait_for(lambda: recorded(run), 120, "a step recorded")
            db.break_()
            on_disk = steps_on_disk(steps_dir)
            wait_for(
                lambda: len(steps_on_disk(steps_dir)) >= len(on_disk) + 2,
                30,
                "two steps written with the database away",
            )
            kill_worker(first)
            unrecorded = sorted(steps_on_disk(steps_dir) - recorded(run))
            workers.append(start_worker(tmp_path, "second", queue, runs_dir))
            wait_for(lambda: recorded(run) >= set(unrecorded), 90, "the next host to record them")
            end_run(run)
        finally:
            stop_workers(*workers)
    assert len(unrecorded) >= 2
    for step in unrecorded:
        record = StepRecord.objects.get(run=run, step=step)
        figures = {
            name: getattr(record, name)
            for name in ("seconds", "policy_version", "generated_tokens", "finished_train", "cap")
        }
        print(f"\nstep {step} recovered: {figures}")
        assert record.seconds > 0 and record.cap > 0 and record.generated_tokens > 0, figures
        assert record.policy_version == step - 1  # trainer mode none: the step before's
        report = json.loads((steps_dir / f"{step:06d}" / "report.json").read_text())
        assert figures == {
            **{name: report[name] for name in figures if name != "seconds"},
            "seconds": pytest.approx(report["written_at"] - report["started_at"]),
        }
        assert abs((record.written_at - record.started_at).total_seconds() - record.seconds) < 0.01


def test_a_step_folder_without_a_report_is_recorded_from_its_samples_and_the_log_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder written by a version before reports: rebuilt from its samples, as before."""
    run = Run.objects.create(
        name="old-folder",
        config={},
        state=RunState.RUNNING,
        lease_owner="me",
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    folder = tmp_path / "steps" / "000001"
    folder.mkdir(parents=True)
    sample = {"reward": 1.0, "policy_version": 0, "generated_tokens": 7}
    (folder / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    assert store.recover_steps(run.pk, "me", tmp_path / "steps", {1}) == 1
    record = StepRecord.objects.get(run=run, step=1)
    assert (record.episodes, record.tokens, record.seconds) == (1, 7, 0.0)
    assert "has no readable report" in caplog.text


def test_a_restored_runs_decisions_are_filed_under_its_stored_step(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """Paused after a few steps and resumed: the restore decision is filed under the step the
    run stopped at, not step 0."""
    with sim_engines(tmp_path, 2) as engines:
        run = Run.objects.create(
            name="restore-step",
            config=run_document(engines, max_steps=10_000),
            state=RunState.QUEUED,
        )
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            wait_for(lambda: len(recorded(run)) >= 2, 120, "two steps")
            override_create(run=run, created_by=None, mode="pause", reason="test")
            wait_for(lambda: Run.objects.get(pk=run.pk).state == RunState.PAUSED, 60, "the pause")
            run.refresh_from_db()
            stored_step = run.step
            override_create(run=run, created_by=None, mode="resume", reason="test")
            restore = wait_for(
                lambda: Decision.objects.filter(run=run, kind="restore").first(), 60, "a restore"
            )
            end_run(run)
        finally:
            stop_workers(worker)
    print(f"\nstored step {stored_step}, restore decision filed under step {restore.step}")
    assert stored_step >= 2
    assert restore.step == stored_step


def test_a_pause_posted_before_the_run_starts_ends_it_paused_at_once(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """A pause stored for a run that has no host yet (its last one died) is applied as the
    next host starts; the host's helper tasks stop with it, and the run is paused within
    seconds. Several runs, one after another: the helper that ignored its cancellation did so
    only when the cancel met its subscription to Redis, about one start in two."""
    with sim_engines(tmp_path, 2) as engines:
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        paused_after = []
        try:
            for index in range(PAUSED_RUNS):
                run = Run.objects.create(
                    name=f"pause-at-start-{index}",
                    config=run_document(engines, max_steps=10_000),
                    state=RunState.RUNNING,
                )
                override_create(run=run, created_by=None, mode="pause", reason="before it starts")
                sent = time.monotonic()
                enqueue(run.pk)
                wait_for(
                    lambda run=run: Run.objects.get(pk=run.pk).state == RunState.PAUSED,
                    30,
                    "a pause",
                )
                paused_after.append(round(time.monotonic() - sent, 2))
        finally:
            stop_workers(worker)
    print(f"\npaused after (s from the task sent): {paused_after}")
    assert "did not stop" not in worker.log()
    assert max(paused_after[1:]) < PAUSED_WITHIN_S  # the first: the worker's warm-up


def test_a_pins_time_runs_on_while_its_run_has_no_host(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """A pin made, its host killed: the next host restores the pin with the time it has left
    now, and it lapses PIN_TTL_S after it was made, not PIN_TTL_S after the restore."""
    with sim_engines(tmp_path, 2) as engines:
        run = Run.objects.create(
            name="pin-across-a-kill",
            config=run_document(engines, max_steps=10_000),
            state=RunState.QUEUED,
        )
        first = start_worker(tmp_path, "first", queue, runs_dir)
        workers = [first]
        try:
            enqueue(run.pk)
            wait_for(lambda: recorded(run), 120, "a step")
            run.refresh_from_db()
            made = override_create(run=run, created_by=None, mode="pin", cap=12, ttl_s=PIN_TTL_S)
            pinned = wait_for(lambda: Override.objects.get(pk=made.pk).decision, 10, "the pin")
            wait_for(
                lambda: (Run.objects.get(pk=run.pk).controller_state or {}).get("pin"),
                10,
                "the pin in the stored state",
            )
            kill_worker(first)
            workers.append(start_worker(tmp_path, "second", queue, runs_dir))
            lapsed = wait_for(
                lambda: Decision.objects.filter(run=run, kind="pin-expired").first(),
                PIN_TTL_S + 60,
                "the pin to lapse",
            )
            restore = Decision.objects.get(run=run, kind="restore")
            end_run(run)
        finally:
            stop_workers(*workers)
    restored_after = (restore.at - pinned.at).total_seconds()
    lapsed_after = (lapsed.at - pinned.at).total_seconds()
    print(
        f"\npin of {PIN_TTL_S:g} s: restored {restored_after:.1f} s after it was made, "
        f"lapsed {lapsed_after:.1f} s after it was made"
    )
    assert restored_after < PIN_TTL_S  # it was still holding when the next host took over
    assert abs(lapsed_after - PIN_TTL_S) < LAPSE_SLACK_S


def test_eval_waves_in_flight_at_a_kill_run_again_on_the_next_host_the_final_one_too(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """Two steps, a wave after each: the host is killed while both waves run (the second
    the run's final one); the next host runs both again and the run completes with both
    recorded."""
    with sim_engines(tmp_path, 2) as engines:
        document = run_document(engines, max_steps=2, eval_every=1)
        document["env"].append(EVAL_ENV)
        run = Run.objects.create(name="kill-in-eval", config=document, state=RunState.QUEUED)
        first = start_worker(tmp_path, "first", queue, runs_dir)
        workers = [first]
        try:
            enqueue(run.pk)
            wait_for(
                lambda: Decision.objects.filter(run=run, kind="eval-wave").count() == 2,
                120,
                "both waves started",
                every=0.05,
            )
            kill_worker(first)
            started = {r.wave: r.finished_at for r in EvalRecord.objects.filter(run=run)}
            workers.append(start_worker(tmp_path, "second", queue, runs_dir))
            wait_for(
                lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 120, "the run to end"
            )
        finally:
            stop_workers(*workers)
    run.refresh_from_db()
    records = list(EvalRecord.objects.filter(run=run).order_by("wave"))
    restore = Decision.objects.get(run=run, kind="restore")
    again = Decision.objects.filter(run=run, kind="eval-wave", at__gt=restore.at)
    print(
        f"\nat the kill: {started}; run {run.state}, eval_waves {run.eval_waves}, records "
        f"{[(r.wave, r.after_step, r.finished_at is not None, r.episodes) for r in records]}"
    )
    assert run.state == RunState.COMPLETED, run.error
    assert run.eval_waves == 2
    assert [(r.wave, r.after_step) for r in records] == [(1, 1), (2, 2)]
    assert all(r.finished_at is not None and r.started_at > restore.at for r in records)
    assert all(sum(r.episodes.values()) + sum(r.failed.values()) == 4 for r in records)
    assert [d.reason.split(":")[0] for d in again] == [
        "Eval wave 1 after step 1 (again",
        "Eval wave 2 after step 2 (again",
    ]
