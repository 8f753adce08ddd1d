"""Weights flow back: a trainer's acknowledgement with a checkpoint brings every engine of a
hosted run to the new version (simulated engines serving vLLM's weight routes), in sync and
in rolling mode, each engine's update a decision."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.roles import grant
from controlplane.runs.services import enqueue
from tests.integration.hosting import (
    run_document,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)
from tests.model_folders import model_folder
from workers.core.decisions import DecisionKind

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 3


def served(url: str) -> str:
    return httpx.get(f"{url}/weight_info", timeout=5).json()["weight_version"]


@pytest.mark.parametrize("mode", ["sync", "rolling"])
def test_acknowledged_weights_reach_every_engine(
    tmp_path: Path, queue: str, runs_dir: Path, mode: str
) -> None:
    trainer = get_user_model().objects.create_user(username="trainer", password="pw")
    grant(trainer, "operator")
    api = APIClient()
    api.force_authenticate(trainer)
    dev = {"VLLM_SERVER_DEV_MODE": "1"}
    with sim_engines(tmp_path, 2, "--reload-s", "0.3", env=dev) as engines:
        document = run_document(engines, max_steps=STEPS)
        document["trainer"] = {"mode": "external", "ack_timeout_s": 60, "updates": mode}
        run = Run.objects.create(name=f"weights-{mode}", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            assert {served(e.url) for e in engines} == {"default"}
            enqueue(run.pk)
            for step in range(1, STEPS + 1):
                wait_for(
                    lambda s=step: StepRecord.objects.filter(run=run, step=s).exists(),
                    60,
                    f"step {step}",
                )
                run.refresh_from_db()
                checkpoint = model_folder(Path(run.output_dir) / "checkpoints" / f"v{step}")
                answer = api.post(
                    f"/api/runs/{run.pk}/steps/{step}/ack/",
                    {"policy_version": step, "checkpoint": str(checkpoint)},
                    format="json",
                )
                assert answer.status_code in (200, 201), answer.content
                wait_for(
                    lambda s=step: all(served(e.url) == str(s) for e in engines),
                    30,
                    f"every engine to serve version {step}",
                )
            wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 60, "the run to end")
        finally:
            stop_worker(worker)
    run.refresh_from_db()
    assert run.state == RunState.COMPLETED, run.error
    updates = list(Decision.objects.filter(run=run, kind=DecisionKind.WEIGHTS.value))
    assert len(updates) == 2 * STEPS and not any(d.alert for d in updates)
    assert sorted(d.figures["version"] for d in updates) == sorted(2 * list(range(1, STEPS + 1)))
    assert all(f"({mode} update)" in d.reason and " serves version " in d.reason for d in updates)
    # The API lists them, each naming its engine (a text among the figures once made it a 500).
    listed = api.get(f"/api/runs/{run.pk}/decisions/", {"kind": "weights"})
    assert listed.status_code == 200, listed.content
    per_engine: dict[str, list[int]] = {}
    for decision in listed.json()["results"]:
        per_engine.setdefault(decision["engine"], []).append(decision["figures"]["version"])
    assert len(per_engine) == 2 and "" not in per_engine
    assert all(versions == list(range(1, STEPS + 1)) for versions in per_engine.values())
