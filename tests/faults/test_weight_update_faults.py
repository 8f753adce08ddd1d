"""A worker killed in the middle of a weight update: the next host finishes it, and every
engine ends on one known version, serving (simulated engines with vLLM's weight routes, two
Celery workers, the trainer's acknowledgements through the API)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from controlplane.runs.models import Decision, Run, RunState
from controlplane.runs.services import enqueue
from tests.integration.hosting import (
    kill_worker,
    run_document,
    sim_engines,
    start_worker,
    stop_workers,
    wait_for,
)
from tests.integration.test_weight_updates import (
    ack,
    every_engine_serves,
    served,
    step_written,
    trainer_client,
)
from workers.core.decisions import DecisionKind

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
STEPS = 3
RELOAD_S = 4.0  # long enough to kill the host inside it
# The dead host's lease (20 s), a sweep (5 s), the next host's start and its first check.
TAKEOVER_S = 60.0


def paused(url: str) -> bool:
    return bool(httpx.get(f"{url}/is_paused", timeout=5).json()["is_paused"])


def weights_decisions(run: Run) -> list[Decision]:
    return list(Decision.objects.filter(run=run, kind=DecisionKind.WEIGHTS.value).order_by("at"))


def external_run(engines: list, name: str) -> Run:
    document = run_document(engines, max_steps=STEPS)
    document["trainer"] = {"mode": "external", "ack_timeout_s": 120, "updates": "sync"}
    return Run.objects.create(name=name, config=document, state=RunState.QUEUED)


def test_a_worker_killed_while_its_engines_reload_leaves_them_to_the_next_host(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """Killed with both engines paused and reloading version 1: the next host brings them
    to version 1, resumed, and the run goes on to its end with every update recorded."""
    api = trainer_client()
    with sim_engines(tmp_path, 2, "--reload-s", str(RELOAD_S), env=DEV) as engines:
        run = external_run(engines, "killed-mid-reload")
        first = start_worker(tmp_path, "a", queue, runs_dir)
        second = None
        try:
            enqueue(run.pk)
            step_written(run, 1)
            ack(api, run, 1)
            wait_for(lambda: all(paused(e.url) for e in engines), 10, "the update's pause")
            kill_worker(first)
            assert all(paused(e.url) for e in engines)
            assert {served(e.url) for e in engines} == {"default"}  # mid-reload: not yet 1
            second = start_worker(tmp_path, "b", queue, runs_dir)
            every_engine_serves(engines, 1, timeout=TAKEOVER_S)
            wait_for(lambda: not any(paused(e.url) for e in engines), 10, "the engines resumed")
            for step in range(2, STEPS + 1):
                step_written(run, step, timeout=TAKEOVER_S)
                ack(api, run, step)
                every_engine_serves(engines, step, timeout=30)
            wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 60, "the run to end")
        finally:
            stop_workers(first, second)
        assert not any(paused(e.url) for e in engines)
    run.refresh_from_db()
    assert run.state == RunState.COMPLETED, run.error
    updates = weights_decisions(run)
    assert not [d.reason for d in updates if d.alert]
    per_engine: dict[str, list[int]] = {}
    for decision in updates:
        per_engine.setdefault(decision.engine, []).append(decision.figures["version"])
    assert len(per_engine) == 2, per_engine
    for engine, versions in per_engine.items():  # the dead host's update of 1 never ended
        assert versions == list(range(1, STEPS + 1)), (engine, versions)


def test_an_engine_a_dead_host_left_paused_on_the_new_version_is_resumed_by_the_next(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """A host killed after its engine took version 1 but before it resumed it leaves that
    engine paused on the right version, where a read-back of versions alone sees nothing
    wrong. The next host finds it paused, pushes version 1 again (whatever the dead host's
    reload had reached) and resumes it; the run goes on to its end."""
    api = trainer_client()
    with sim_engines(tmp_path, 2, "--reload-s", "0.3", env=DEV) as engines:
        run = external_run(engines, "left-paused")
        first = start_worker(tmp_path, "a", queue, runs_dir)
        second = None
        try:
            enqueue(run.pk)
            step_written(run, 1)
            ack(api, run, 1)
            every_engine_serves(engines, 1, timeout=30)
            # The host stored version 1 as the run's: the next resumes past the update.
            wait_for(lambda: Run.objects.get(pk=run.pk).policy_version == 1, 30, "version 1")
            kill_worker(first)
            # What the dead host left: engine 0 paused, on version 1 (killed before /resume).
            left = engines[0].url
            assert httpx.post(f"{left}/pause", params={"mode": "keep"}, timeout=10).is_success
            assert paused(left) and served(left) == "1"
            second = start_worker(tmp_path, "b", queue, runs_dir)
            wait_for(lambda: not paused(left), TAKEOVER_S, "the left engine resumed")
            for step in range(2, STEPS + 1):
                step_written(run, step, timeout=TAKEOVER_S)
                ack(api, run, step)
                every_engine_serves(engines, step, timeout=30)
            wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 60, "the run to end")
        finally:
            stop_workers(first, second)
    run.refresh_from_db()
    assert run.state == RunState.COMPLETED, run.error
    found = [d for d in weights_decisions(run) if "left paused" in d.reason]
    assert len(found) == 1, [d.reason for d in weights_decisions(run)]  # the other: serving
    assert found[0].figures["version"] == 1 and not found[0].alert
    assert "version 1 pushed again" in found[0].reason


def test_a_trainer_that_stops_acknowledging_fails_the_run_on_its_timeout_saying_so(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """The trainer acknowledges step 1 with weights, then dies: the run waits its
    ack_timeout_s for step 2 and fails with that reason, the engines left serving version 1
    and resumed, the step written and its record kept."""
    api = trainer_client()
    with sim_engines(tmp_path, 2, "--reload-s", "0.3", env=DEV) as engines:
        document = run_document(engines, max_steps=STEPS)
        document["trainer"] = {"mode": "external", "ack_timeout_s": 4, "updates": "sync"}
        run = Run.objects.create(name="trainer-died", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "a", queue, runs_dir)
        try:
            enqueue(run.pk)
            step_written(run, 1)
            ack(api, run, 1)
            every_engine_serves(engines, 1, timeout=30)
            step_written(run, 2)
            wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 60, "the run to fail")
        finally:
            stop_workers(worker)
        assert {served(e.url) for e in engines} == {"1"}
        assert not any(paused(e.url) for e in engines)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert run.error == "the trainer did not acknowledge step 2 within 4 s", run.error
    assert run.step == 2 and run.policy_version == 1
