"""The file form of trainer mode ``external``: what ``<output>/acks/N`` may hold, and what
the run makes of it (waits, takes it, or fails saying why)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.model_folders import model_folder
from workers.core.orchestrator.ports import Ack
from workers.core.orchestrator.trainer import RunFailed
from workers.runtime.acks import read_ack


def test_a_version_alone_or_with_a_checkpoint_is_an_ack(tmp_path: Path) -> None:
    path, folder = tmp_path / "1", model_folder(tmp_path / "weights")
    path.write_text("4\n")
    assert read_ack(path, tmp_path) == Ack(4)
    path.write_text(json.dumps({"policy_version": 5}))
    assert read_ack(path, tmp_path) == Ack(5)
    path.write_text(json.dumps({"policy_version": 6, "checkpoint": "weights"}))
    assert read_ack(path, tmp_path) == Ack(6, str(folder.resolve()))


@pytest.mark.parametrize("text", [None, "", '{"policy_version": 3, "checkp', "-1", "true"])
def test_an_absent_half_written_or_versionless_file_is_waited_on(
    tmp_path: Path, text: str | None
) -> None:
    path = tmp_path / "1"
    if text is not None:
        path.write_text(text)
    assert read_ack(path, tmp_path) is None


@pytest.mark.parametrize(
    ("checkpoint", "reason"),
    [
        (7, "checkpoint must be a folder path, got 7"),
        ("/etc", "checkpoint must be inside "),
        ("empty", "checkpoint 'empty': no config.json (a model folder needs one)"),
    ],
)
def test_a_whole_ack_naming_a_checkpoint_that_cannot_be_loaded_fails_the_run(
    tmp_path: Path, checkpoint: object, reason: str
) -> None:
    (tmp_path / "empty").mkdir()
    path = tmp_path / "acks" / "1"
    path.parent.mkdir()
    path.write_text(json.dumps({"policy_version": 1, "checkpoint": checkpoint}))
    with pytest.raises(RunFailed) as failed:
        read_ack(path, tmp_path)
    assert str(failed.value).startswith(f"the acknowledgement in {path} is refused: {reason}")
