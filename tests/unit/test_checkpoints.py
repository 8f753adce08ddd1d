"""What a trainer's acknowledgement may name as its checkpoint: a model folder vLLM can
load, under the allowed root; everything else refused with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.model_folders import model_folder
from workers.runtime.checkpoints import CheckpointRefused, check_checkpoint, checkpoint_root


def refusal(asked: str, root: Path) -> str:
    with pytest.raises(CheckpointRefused) as refused:
        check_checkpoint(asked, root)
    return str(refused.value)


def test_a_model_folder_under_the_root_is_taken_resolved(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "ckpt" / "step-1")
    assert check_checkpoint(str(folder), tmp_path) == folder.resolve()
    assert check_checkpoint("ckpt/step-1", tmp_path) == folder.resolve()  # relative to the root


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (lambda whole: whole[:-3], "is cut short: "),
        (lambda whole: whole[:5], "too short for a safetensors header"),
        (lambda whole: (2**40).to_bytes(8, "little") + whole[8:], "is not safetensors (a header"),
        (lambda whole: whole[:8] + b"{" * (len(whole) - 8), "its header is not JSON"),
        (lambda whole: b"\x02" + bytes(7) + b"[]", "its header is not an object"),
        (
            lambda whole: b"\x0c" + bytes(7) + b'{"w": {}}   ',
            "tensor 'w' has no byte range",
        ),
    ],
)
def test_a_weights_file_that_is_not_whole_safetensors_is_refused(
    tmp_path: Path, content, reason: str
) -> None:
    weights = model_folder(tmp_path / "m") / "model.safetensors"
    weights.write_bytes(content(weights.read_bytes()))
    assert reason in refusal("m", tmp_path)


def test_sharded_weights_need_every_shard_of_their_index(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "sharded", shards=3)
    assert check_checkpoint("sharded", tmp_path) == folder.resolve()
    (folder / "model-00002-of-00003.safetensors").unlink()
    assert refusal("sharded", tmp_path) == (
        "'sharded': model.safetensors.index.json names missing shards: "
        "model-00002-of-00003.safetensors"
    )


def test_an_index_that_is_no_index_or_names_shards_elsewhere_is_refused(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "m", shards=1)
    index = folder / "model.safetensors.index.json"
    index.write_text('{"weight_map": {}}')
    assert "is not an index" in refusal("m", tmp_path)
    index.write_text("[1, 2")
    assert "is not an index" in refusal("m", tmp_path)
    model_folder(tmp_path / "other")
    index.write_text('{"weight_map": {"w": "../other/model.safetensors"}}')
    assert "names shards outside the folder: ../other/model.safetensors" in refusal("m", tmp_path)


@pytest.mark.parametrize(
    ("asked", "reason"),
    [
        ("", "must name a folder, got ''"),
        ("nowhere", "'nowhere' does not exist"),
        ("ckpt/../ckpt", "may not go up a folder ('..'), got 'ckpt/../ckpt'"),
        ("/etc", "must be inside"),
    ],
)
def test_a_path_that_is_empty_missing_or_outside_the_root_is_refused(
    tmp_path: Path, asked: str, reason: str
) -> None:
    model_folder(tmp_path / "ckpt")
    assert reason in refusal(asked, tmp_path)


def test_a_symlink_out_of_the_root_is_refused_folder_or_file(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", model_folder(tmp_path / "elsewhere")
    root.mkdir()
    (root / "link").symlink_to(elsewhere, target_is_directory=True)
    assert refusal("link", root).startswith(f"must be inside {root}, got 'link' (which is ")
    inside = model_folder(root / "inside")
    (inside / "model.safetensors").unlink()
    (inside / "model.safetensors").symlink_to(elsewhere / "model.safetensors")
    assert "'inside': model.safetensors leads out of" in refusal("inside", root)


def test_a_folder_without_a_config_or_weights_is_no_model_folder(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"weights")
    assert refusal("m", tmp_path) == (
        "'m': no weights: no *.safetensors file, no model.safetensors.index.json"
    )
    (folder / "config.json").unlink()
    assert refusal("m", tmp_path) == "'m': no config.json (a model folder needs one)"
    (folder / "config.json").write_text("{not json")
    assert "'m': config.json is not JSON" in refusal("m", tmp_path)
    (tmp_path / "file").write_text("")
    assert refusal("file", tmp_path) == "'file' is not a folder"


def test_an_unreadable_folder_or_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Permission bits hold for every user but root (which the test may run as): the access
    check is told what a plain user would be told."""
    folder = model_folder(tmp_path / "m")
    unreadable = {folder / "model.safetensors"}
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: Path(p) not in unreadable and real_access(p, mode)
    )
    assert refusal("m", tmp_path) == "'m': model.safetensors is not readable"
    unreadable.add(folder)
    assert refusal("m", tmp_path) == "'m' is not readable"


def test_the_root_is_the_configured_folder_or_else_the_runs(tmp_path: Path) -> None:
    assert checkpoint_root("/shared/ckpts", tmp_path) == Path("/shared/ckpts")
    assert checkpoint_root("", tmp_path) == tmp_path
    assert checkpoint_root(None, tmp_path) == tmp_path
