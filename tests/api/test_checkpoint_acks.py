"""A trainer's acknowledgement with the folder of its new weights, through HTTP: a loadable
model folder inside the run's checkpoint root is stored with the ack and shown with the
step; anything else is a 400 at ``checkpoint`` with the reason, and nothing changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from django.test import Client
from rest_framework.test import APIClient

from controlplane.runs.models import Run, StepRecord
from tests.api.conftest import make_run, make_step
from tests.model_folders import model_folder
from workers.core.orchestrator.ports import Ack
from workers.runtime import store

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(tmp_path: Path, private_queue: str) -> Run:
    """A run waiting for its trainer, with step 1 written into its folder."""
    output = tmp_path / "runs" / "7"
    output.mkdir(parents=True)
    run = make_run(config={"name": "r", "trainer": {"mode": "external"}}, output_dir=str(output))
    make_step(run, 1, version=0)
    return run


def ack(client: APIClient, run: Run, body: dict[str, object], step: int = 1) -> object:
    return client.post(f"/api/runs/{run.pk}/steps/{step}/ack/", body, format="json")


def test_an_ack_stores_its_checkpoint_resolved_and_the_worker_reads_it(
    operator_client: APIClient, run: Run
) -> None:
    folder = model_folder(Path(run.output_dir) / "checkpoints" / "step-1")
    response = ack(operator_client, run, {"policy_version": 1, "checkpoint": "checkpoints/step-1"})
    assert response.status_code == 200, response.json()
    assert response.json()["step"]["acked_checkpoint"] == str(folder.resolve())
    listed = operator_client.get(f"/api/runs/{run.pk}/steps/").json()["results"][0]
    assert (listed["acked_version"], listed["acked_checkpoint"]) == (1, str(folder.resolve()))
    # what the host's DbAcks hands the orchestrator, and what a new host starts from
    assert store.acked(run.pk, 1) == Ack(1, str(folder.resolve()))
    assert store.last_checkpoint(run.pk) == str(folder.resolve())


def test_an_ack_without_a_checkpoint_still_works(operator_client: APIClient, run: Run) -> None:
    response = ack(operator_client, run, {"policy_version": 1})
    assert response.status_code == 200 and response.json()["step"]["acked_checkpoint"] == ""
    assert store.acked(run.pk, 1) == Ack(1, None)
    assert store.last_checkpoint(run.pk) is None


def test_a_second_ack_for_a_step_must_be_the_same_or_is_409(
    operator_client: APIClient, run: Run
) -> None:
    first = model_folder(Path(run.output_dir) / "ckpt-a")
    model_folder(Path(run.output_dir) / "ckpt-b")
    assert (
        ack(operator_client, run, {"policy_version": 1, "checkpoint": "ckpt-a"}).status_code == 200
    )
    again = ack(operator_client, run, {"policy_version": 1, "checkpoint": str(first)})
    assert again.status_code == 200 and again.json()["acknowledged"] is False  # the same folder
    other_version = ack(operator_client, run, {"policy_version": 2, "checkpoint": "ckpt-a"})
    assert other_version.status_code == 409
    assert other_version.json() == {
        "detail": "step 1 was acknowledged with policy version 1, not 2"
    }
    other_folder = ack(operator_client, run, {"policy_version": 1, "checkpoint": "ckpt-b"})
    assert other_folder.status_code == 409
    assert other_folder.json()["detail"] == (
        f"step 1 was acknowledged with checkpoint {first.resolve()}, "
        f"not {(Path(run.output_dir) / 'ckpt-b').resolve()}"
    )
    none = ack(operator_client, run, {"policy_version": 1})
    assert none.status_code == 409 and none.json()["detail"].endswith(", not none")
    assert StepRecord.objects.get(run=run, step=1).acked_checkpoint == str(first.resolve())


def _unreadable(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``path`` unreadable as it is to a plain user (the tests may run as root)."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != path and real(p, mode))


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("missing", "'missing' does not exist"),
        ("a file", "'a file' is not a folder"),
        ("no config", "'no config': no config.json (a model folder needs one)"),
        ("no weights", "'no weights': no weights: no *.safetensors file, no model.safetensors"),
        ("a shard missing", "names missing shards: model-00002-of-00002.safetensors"),
        ("unreadable", "'unreadable': model.safetensors is not readable"),
        ("absolute elsewhere", "must be inside "),
        ("up and out", "may not go up a folder ('..')"),
        ("a symlink out", "must be inside "),
        ("empty", "may not be blank"),
        ("cut short", "model.safetensors is cut short: 20 of its "),
        ("not safetensors", "model.safetensors is not safetensors"),
    ],
)
def test_a_checkpoint_that_cannot_be_loaded_is_400_at_checkpoint_and_nothing_changes(
    operator_client: APIClient,
    run: Run,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    reason: str,
) -> None:
    output, elsewhere = Path(run.output_dir), model_folder(tmp_path / "elsewhere")
    asked = {"absolute elsewhere": str(elsewhere), "up and out": "../../elsewhere", "empty": ""}
    (output / "a file").write_text("")
    (model_folder(output / "no config") / "config.json").unlink()
    (model_folder(output / "no weights") / "model.safetensors").unlink()
    (
        model_folder(output / "a shard missing", shards=2) / "model-00002-of-00002.safetensors"
    ).unlink()
    _unreadable(model_folder(output / "unreadable") / "model.safetensors", monkeypatch)
    (output / "a symlink out").symlink_to(elsewhere, target_is_directory=True)
    weights = model_folder(output / "cut short") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20])  # a trainer killed while saving
    (model_folder(output / "not safetensors") / "model.safetensors").write_bytes(
        b"PK\x03\x04zip archive, not safetensors"
    )
    response = ack(operator_client, run, {"policy_version": 1, "checkpoint": asked.get(case, case)})
    assert response.status_code == 400, response.json()
    assert response.json()["detail"] == "the request is invalid"
    (message,) = response.json()["errors"]["checkpoint"]
    assert reason in message
    record = StepRecord.objects.get(run=run, step=1)
    assert (record.acked_at, record.acked_version, record.acked_checkpoint) == (None, None, "")
    # and the same ack with a loadable folder is taken afterwards: nothing was half stored
    model_folder(output / "good")
    assert ack(operator_client, run, {"policy_version": 1, "checkpoint": "good"}).status_code == 200


def test_pacer_checkpoints_dir_replaces_the_runs_folder_as_the_root(
    operator_client: APIClient, run: Run, tmp_path: Path, settings: object
) -> None:
    shared = tmp_path / "shared"
    settings.PACER_CHECKPOINTS_DIR = str(shared)  # type: ignore[attr-defined]
    model_folder(Path(run.output_dir) / "in-the-run")
    refused = ack(operator_client, run, {"policy_version": 1, "checkpoint": "in-the-run"})
    assert refused.status_code == 400
    assert refused.json()["errors"]["checkpoint"] == ["'in-the-run' does not exist"]
    outside = ack(
        operator_client,
        run,
        {"policy_version": 1, "checkpoint": str(Path(run.output_dir) / "in-the-run")},
    )
    assert outside.status_code == 400
    assert outside.json()["errors"]["checkpoint"][0].startswith(f"must be inside {shared}, got ")
    folder = model_folder(shared / "run-7" / "v1")
    taken = ack(operator_client, run, {"policy_version": 1, "checkpoint": "run-7/v1"})
    assert taken.status_code == 200 and taken.json()["step"]["acked_checkpoint"] == str(folder)


def test_a_run_with_no_folder_yet_refuses_a_checkpoint(
    operator_client: APIClient, private_queue: str
) -> None:
    run = make_run(config={"name": "r", "trainer": {"mode": "external"}})
    make_step(run, 1)
    response = ack(operator_client, run, {"policy_version": 1, "checkpoint": "ckpt"})
    assert response.status_code == 409
    assert (
        response.json()["detail"] == f"run {run.pk} has no folder yet for its checkpoints to be in"
    )


def test_the_schema_shows_the_checkpoint_in_the_ack_and_the_step(client: Client) -> None:
    schema = yaml.safe_load(client.get("/api/schema/").content)
    components = schema["components"]["schemas"]
    assert components["AckInputRequest"]["required"] == ["policy_version"]
    checkpoint = components["AckInputRequest"]["properties"]["checkpoint"]
    assert checkpoint["type"] == "string" and "safetensors" in checkpoint["description"]
    assert "acked_checkpoint" in components["Step"]["properties"]
