"""The benchmark's command line explains itself: every command's help prints (a bare ``%`` in
a help text once made ``--help`` crash)."""

from __future__ import annotations

import pytest

from bench.virtual.cli import main


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["join", "--help"]])
def test_help_prints_and_exits_zero(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as leaving:
        main(argv)
    assert leaving.value.code == 0
    assert "usage:" in capsys.readouterr().out
