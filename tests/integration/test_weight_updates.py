"""Weights flow back: a trainer's acknowledgement with a checkpoint brings every engine of a
hosted run to the new version (simulated engines serving vLLM's weight routes), in sync and
in rolling mode, each engine's update a decision; every turn carries the version its engine
served, an engine restarted mid-run gets its version back, and the controller takes a pause
for what it is."""

from __future__ import annotations

import json
import os
import re
import signal
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import torch
from rest_framework.test import APIClient

from controlplane.runs.models import Decision, EngineSample, Run, RunState, StepRecord
from controlplane.runs.services import enqueue
from tests.integration.hosting import (
    SimEngine,
    operator_api,
    run_document,
    sim_engines,
    start_sim,
    start_worker,
    stop_worker,
    wait_for,
    wait_healthy,
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
    api = trainer_client()
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
                step_written(run, step, timeout=60)
                ack(api, run, step)
                every_engine_serves(engines, step, timeout=30)
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


def ack(api: APIClient, run: Run, step: int) -> None:
    """The trainer's acknowledgement of ``step``: version ``step``, with its weights."""
    run.refresh_from_db()
    checkpoint = model_folder(Path(run.output_dir) / "checkpoints" / f"v{step}")
    answer = api.post(
        f"/api/runs/{run.pk}/steps/{step}/ack/",
        {"policy_version": step, "checkpoint": str(checkpoint)},
        format="json",
    )
    assert answer.status_code in (200, 201), answer.content


def trainer_client() -> APIClient:
    return operator_api("trainer")


def step_written(run: Run, step: int, *, timeout: float = 90) -> None:
    wait_for(
        lambda: StepRecord.objects.filter(run=run, step=step).exists(), timeout, f"step {step}"
    )


def every_engine_serves(engines: list[SimEngine], version: int, *, timeout: float) -> None:
    wait_for(
        lambda: all(served(e.url) == str(version) for e in engines),
        timeout,
        f"every engine to serve version {version}",
    )


ROLLING_STEPS = 6
BOUND = 1


def test_rolling_updates_tag_every_turn_and_a_restarted_engine_gets_its_version_back(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """Rolling updates with generation running ahead: part of each batch is a version behind,
    none beyond the bound, every turn tagged in batch.pt and samples.jsonl. An engine killed
    and started again on its port comes back on its base weights: the run sees it, pushes
    the current version again, and says so."""
    api = trainer_client()
    dev = {"VLLM_SERVER_DEV_MODE": "1"}
    flags = ("--reload-s", "1.0")
    with sim_engines(tmp_path, 2, *flags, env=dev) as engines:
        document = run_document(engines, max_steps=ROLLING_STEPS, max_off_policy_steps=BOUND)
        document["trainer"] = {"mode": "external", "ack_timeout_s": 120, "updates": "rolling"}
        run = Run.objects.create(name="weights-versions", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            for step in range(1, 4):
                step_written(run, step)
                ack(api, run, step)
                every_engine_serves(engines, step, timeout=60)
            victim = engines[1]
            port = int(victim.url.rsplit(":", 1)[1])
            os.killpg(victim.process.pid, signal.SIGKILL)
            victim.process.wait()
            engines[1] = start_sim(tmp_path / "sim-1-again.log", port, 7, *flags, env=dev)
            wait_healthy(engines[1])
            assert served(engines[1].url) == "default"  # a new process: its base weights
            again = wait_for(
                lambda: Decision.objects.filter(
                    run=run, kind=DecisionKind.WEIGHTS.value, reason__contains="came back"
                ).first(),
                90,  # a dead engine is retried with backoff: at most 11 polls apart
                "the restarted engine to be found and pushed again",
            )
            assert served(engines[1].url) == "3"
            for step in range(4, ROLLING_STEPS + 1):
                step_written(run, step)
                ack(api, run, step)
            wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 90, "the run to end")
        finally:
            stop_worker(worker)
    run.refresh_from_db()
    assert run.state == RunState.COMPLETED, run.error
    assert re.fullmatch(
        r"\S+ came back on its base weights: version 3 pushed again after \d+\.\d s "
        r"\(version check\)",
        again.reason,
    ), again.reason
    assert again.figures["version"] == 3 and not again.alert
    behind = 0
    for record in StepRecord.objects.filter(run=run):
        folder = Path(record.path)
        lines = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
        tensors = torch.load(folder / "batch.pt")
        oldest = tensors["policy_version"].tolist()
        assert oldest == [line["policy_version"] for line in lines]
        for row, line in enumerate(lines):
            versions = line["turn_versions"]
            assert len(versions) == line["turns"] == 2
            assert tensors["turn_versions"][row].tolist()[: len(versions)] == versions
            assert min(versions) == line["policy_version"] >= record.policy_version - BOUND
            behind += line["policy_version"] < record.policy_version
        counts = Counter(str(line["policy_version"]) for line in lines)
        assert record.sampled_versions == dict(counts)
    assert behind > 0  # rolling, with generation ahead of the trainer: some a version behind


SYNC_STEPS = 3
RELOAD_S = 2.0
POLL_S = 0.5


def test_a_sync_update_is_neither_stale_nor_idle_nor_a_preemption_to_the_controller(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """A sync update pauses every engine for RELOAD_S: each shows its frozen batch queued for
    capacity with nothing running and KV empty, poll after poll. The controller, told they
    are updating, neither cuts on that queue nor grows on the empty engines, and never calls
    the pause stale."""
    api = trainer_client()
    dev = {"VLLM_SERVER_DEV_MODE": "1"}
    with sim_engines(tmp_path, 2, "--reload-s", str(RELOAD_S), env=dev) as engines:
        document = run_document(engines, max_steps=SYNC_STEPS)
        document["concurrency"]["poll_interval_s"] = POLL_S
        document["trainer"] = {"mode": "external", "ack_timeout_s": 60, "updates": "sync"}
        run = Run.objects.create(name="weights-sync", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            for step in range(1, SYNC_STEPS + 1):
                step_written(run, step)
                ack(api, run, step)
                every_engine_serves(engines, step, timeout=60)
            wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 90, "the run to end")
        finally:
            stop_worker(worker)
    run.refresh_from_db()
    assert run.state == RunState.COMPLETED, run.error
    decisions = list(Decision.objects.filter(run=run).order_by("at"))
    updates = [d for d in decisions if d.kind == DecisionKind.WEIGHTS.value]
    assert len(updates) == 2 * SYNC_STEPS and not any(d.alert for d in updates)
    assert all(d.figures["seconds"] >= RELOAD_S for d in updates)
    windows = [
        (d.at - timedelta(seconds=d.figures["seconds"]), d.at + timedelta(seconds=2 * POLL_S))
        for d in updates
    ]

    def during(at: datetime) -> bool:
        return any(start <= at <= end for start, end in windows)

    # What a paused engine shows: nothing running, its frozen batch queued for capacity, KV
    # empty: queue overload to a controller that did not know, and room to grow into.
    frozen = EngineSample.objects.filter(run=run, num_running=0, num_waiting_capacity__gt=0)
    assert any(during(s.at) for s in frozen)  # the bait was there
    assert not [d.reason for d in decisions if d.kind == DecisionKind.STALE_FREEZE.value]
    acted = [
        (d.kind, d.reason)
        for d in decisions
        if d.kind in (DecisionKind.CUT.value, DecisionKind.TRIM.value) and during(d.at)
    ]
    assert not acted
    grown = [
        (d.at, d.reason)
        for d in decisions
        if d.kind == DecisionKind.GROW.value
        and any(start + timedelta(seconds=POLL_S + 0.1) <= d.at <= end for start, end in windows)
    ]
    assert not grown
