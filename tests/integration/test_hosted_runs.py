"""Runs hosted by real Celery worker processes on real PostgreSQL and Redis, against
simulated engines over HTTP: the whole run, its records and live events, a worker killed or
shut down mid-run, a task delivered twice, and operator commands."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from channels.layers import get_channel_layer
from django.db import connection

from controlplane.runs.models import (
    Decision,
    EngineSample,
    Override,
    Run,
    RunState,
    StepRecord,
)
from controlplane.runs.services import enqueue, override_create
from tests.integration.hosting import (
    SimEngine,
    run_document,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)
from workers.tasks import run_execute

pytestmark = [pytest.mark.integration, pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with sim_engines(tmp_path_factory.mktemp("sims"), 2) as started:
        yield started


def queued(engines: list[SimEngine], **top: object) -> Run:
    """A run stored as queued, its task not sent yet."""
    document = run_document(engines, **top)
    return Run.objects.create(name=document["name"], config=document, state=RunState.QUEUED)


def state_of(run: Run) -> str:
    run.refresh_from_db()
    return run.state


def steps_on_disk(run_dir: Path) -> dict[int, list[dict[str, object]]]:
    found = {}
    for folder in sorted((run_dir / "steps").iterdir()):
        lines = (folder / "samples.jsonl").read_text().splitlines()
        found[int(folder.name)] = [json.loads(line) for line in lines]
    return found


def test_a_queued_run_runs_its_steps_in_a_worker_and_reports_everything(
    engines: list[SimEngine], queue: str, runs_dir: Path, tmp_path: Path
) -> None:
    run = queued(engines)
    # A small start binds at once, so the run grows within its five steps however fast they go.
    run.config["concurrency"]["initial_inflight"] = 8
    run.save(update_fields=["config"])
    events = asyncio.run(_listening(run, lambda: _run_and_wait(run, queue, runs_dir, tmp_path)))

    assert state_of(run) == RunState.COMPLETED, run.error
    decisions = list(Decision.objects.filter(run=run))
    kinds = [d.kind for d in decisions]
    assert kinds[0] == "bootstrap" and "grow" in kinds
    received = [e["data"]["id"] for e in events if e["type"] == "run.decision"]
    assert received == [d.pk for d in decisions]  # every decision, live, in order
    samples = EngineSample.objects.filter(run=run)
    by_engine: dict[str, set[object]] = {}
    for sample in samples:
        by_engine.setdefault(sample.engine_id, set()).add(sample.at)
    assert len(by_engine) == 2  # a sample of every engine at every poll
    polls = list(by_engine.values())
    assert polls[0] == polls[1] and len(polls[0]) >= 3
    assert any(s.inflight_train for s in samples)  # the run's episodes on each engine, per poll
    records = list(StepRecord.objects.filter(run=run))
    assert [r.step for r in records] == [1, 2, 3, 4, 5]
    for record in records:
        batch = torch.load(Path(record.path) / "batch.pt")
        assert batch["token_ids"].shape[0] == record.episodes == 16
        assert float(batch["rewards"].mean()) == pytest.approx(record.reward_mean, abs=1e-5)
    assert any(e["type"] == "engine.health" for e in events)
    assert events[-1]["type"] == "run.state" and events[-1]["data"]["state"] == "completed"


def _run_and_wait(run: Run, queue: str, runs_dir: Path, tmp_path: Path) -> None:
    worker = start_worker(tmp_path, "solo", queue, runs_dir)
    try:
        enqueue(run.pk)
        wait_for(lambda: state_of(run) in RunState.ended(), 180, "the run to end")
    finally:
        stop_worker(worker)
        connection.close()  # this thread's own: the test database is dropped at the end


async def _listening(run: Run, work: object) -> list[dict[str, object]]:
    """Everything the run's Channels group carries while ``work`` (blocking) runs."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(run.group_name, channel)
    done = asyncio.get_running_loop().run_in_executor(None, work)  # type: ignore[arg-type]
    received: list[dict[str, object]] = []
    while not done.done() or (received and received[-1]["type"] != "run.state"):
        try:
            received.append(await asyncio.wait_for(layer.receive(channel), 1.0))
        except TimeoutError:
            if done.done():
                break
    await done
    await layer.group_discard(run.group_name, channel)
    return received


def test_a_killed_workers_run_resumes_on_another_with_every_step_written_once(
    engines: list[SimEngine], queue: str, runs_dir: Path, tmp_path: Path
) -> None:
    run = queued(engines, max_steps=40)  # about 30 s of work: long enough to be killed
    first = start_worker(tmp_path, "first", queue, runs_dir)
    second = None
    try:
        enqueue(run.pk)
        wait_for(lambda: StepRecord.objects.filter(run=run).count() >= 2, 120, "two steps")
        run.refresh_from_db()
        owner = run.lease_owner
        assert owner.startswith("first-")
        second = start_worker(tmp_path, "second", queue, runs_dir)
        killed_at = time.monotonic()
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait()
        wait_for(
            lambda: Run.objects.filter(pk=run.pk, lease_owner__startswith="second-").exists(),
            45,
            "the second worker to take the run",
        )
        resumed_after = time.monotonic() - killed_at
        wait_for(lambda: state_of(run) in RunState.ended(), 240, "the run to end")
    finally:
        for worker in (first, second):
            if worker is not None and worker.process.poll() is None:
                stop_worker(worker)
    print(f"\nkilled worker's run resumed on the other after {resumed_after:.1f} s")
    assert resumed_after < 30
    assert state_of(run) == RunState.COMPLETED, run.error
    kinds = list(Decision.objects.filter(run=run).values_list("kind", flat=True))
    restore = kinds.index("restore")
    assert "bootstrap" not in kinds[restore:]
    on_disk = steps_on_disk(runs_dir / str(run.pk))
    assert sorted(on_disk) == list(range(1, 41))
    groups = [sample["group_id"] for samples in on_disk.values() for sample in samples]
    assert len(groups) == len(set(groups)) * 4  # no group in two steps: nothing written twice
    assert list(StepRecord.objects.filter(run=run).values_list("step", flat=True)) == list(
        range(1, 41)
    )


def test_a_task_delivered_twice_while_its_host_lives_exits_at_once(
    engines: list[SimEngine], queue: str, runs_dir: Path, tmp_path: Path
) -> None:
    run = queued(engines, max_steps=20)
    worker = start_worker(tmp_path, "dup", queue, runs_dir)
    try:
        enqueue(run.pk)
        wait_for(lambda: state_of(run) == RunState.RUNNING, 60, "the run to start")
        owner = Run.objects.get(pk=run.pk).lease_owner
        second = run_execute.apply_async(args=[run.pk], queue=queue)
        assert "hosted elsewhere" in second.get(timeout=30)
        assert Run.objects.get(pk=run.pk).lease_owner == owner
        wait_for(lambda: state_of(run) in RunState.ended(), 180, "the run to end")
    finally:
        stop_worker(worker)
    assert state_of(run) == RunState.COMPLETED


def test_sigterm_hands_the_run_to_the_next_worker_with_its_state(
    engines: list[SimEngine], queue: str, runs_dir: Path, tmp_path: Path
) -> None:
    run = queued(engines, max_steps=30)
    first = start_worker(tmp_path, "leaving", queue, runs_dir)
    try:
        enqueue(run.pk)
        wait_for(lambda: StepRecord.objects.filter(run=run).count() >= 1, 120, "a step")
        first.process.send_signal(signal.SIGTERM)
        first.process.wait(timeout=60)
    finally:
        if first.process.poll() is None:
            stop_worker(first)
    run.refresh_from_db()
    assert (run.state, run.lease_owner) == (RunState.QUEUED, "")
    assert run.controller_state is not None and run.step >= 1
    second = start_worker(tmp_path, "next", queue, runs_dir)
    try:
        wait_for(lambda: state_of(run) in RunState.ended(), 180, "the run to end")
    finally:
        stop_worker(second)
    assert state_of(run) == RunState.COMPLETED, run.error
    kinds = list(Decision.objects.filter(run=run).values_list("kind", flat=True))
    assert kinds.count("bootstrap") == 1 and kinds.count("restore") == 1


def test_pins_are_applied_as_decisions_within_a_second(
    engines: list[SimEngine], queue: str, runs_dir: Path, tmp_path: Path
) -> None:
    run = queued(engines, max_steps=1000)
    worker = start_worker(tmp_path, "pins", queue, runs_dir)
    latencies = []
    try:
        enqueue(run.pk)
        wait_for(lambda: Decision.objects.filter(run=run, kind="bootstrap").exists(), 60, "start")
        for n in range(50):
            run.refresh_from_db()
            override = override_create(
                run=run, created_by=None, mode="pin", cap=10 + n, ttl_s=60.0, reason="test"
            )
            decision = wait_for(
                lambda o=override: Override.objects.get(pk=o.pk).decision, 10, "the pin's decision"
            )
            latencies.append((decision.at - override.created_at).total_seconds())
            assert (decision.kind, decision.cap_after) == ("pin", 10 + n)
            # the run's cap is written with the decision, not at the next poll
            assert Run.objects.values_list("cap", flat=True).get(pk=run.pk) == 10 + n
        run.refresh_from_db()
        override_create(run=run, created_by=None, mode="stop", reason="done")
        wait_for(lambda: state_of(run) in RunState.ended(), 60, "the run to stop")
    finally:
        stop_worker(worker)
    assert state_of(run) == RunState.CANCELLED
    latencies.sort()
    median, p99 = statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))]
    print(
        f"\nstored override -> stored decision over 50 pins: median {median * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms"
    )
