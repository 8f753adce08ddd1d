"""A hosted run's folder: under the runs folder, ending in the run's id, never a run's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.core.config.fields import ConfigError
from workers.runtime.run_folders import run_folder


def test_a_run_without_a_folder_of_its_own_writes_in_its_id(tmp_path: Path) -> None:
    assert run_folder(tmp_path, 7, None) == tmp_path / "7"


@pytest.mark.parametrize("asked", ["team/sweep", "team/sweep/", "./team//sweep"])
def test_a_folder_asked_for_is_under_the_runs_folder_and_ends_in_the_id(
    tmp_path: Path, asked: str
) -> None:
    assert run_folder(tmp_path, 7, asked) == tmp_path / "team" / "sweep" / "7"


def test_an_absolute_folder_inside_the_runs_folder_is_taken_as_under_it(tmp_path: Path) -> None:
    assert run_folder(tmp_path, 7, str(tmp_path / "team")) == tmp_path / "team" / "7"


@pytest.mark.parametrize("asked", ["/etc/pacer", "..", "a/../../b", "7", "team/007/x"])
def test_a_folder_outside_or_shaped_like_a_runs_is_refused(tmp_path: Path, asked: str) -> None:
    with pytest.raises(ConfigError) as refused:
        run_folder(tmp_path, 3, asked)
    assert [error.path for error in refused.value.errors] == ["output.dir"]


def test_a_symlink_out_of_the_runs_folder_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "runs", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(ConfigError, match="inside PACER_RUNS_DIR"):
        run_folder(root, 3, "link/team")
