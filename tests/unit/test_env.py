"""Settings read from the environment: typos are errors, not silent defaults."""

from __future__ import annotations

import pytest

from controlplane.env import env_bool, env_list


def test_env_bool_reads_common_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACER_FLAG", "Yes")
    assert env_bool("PACER_FLAG", False) is True
    monkeypatch.setenv("PACER_FLAG", "0")
    assert env_bool("PACER_FLAG", True) is False
    monkeypatch.delenv("PACER_FLAG")
    assert env_bool("PACER_FLAG", True) is True


def test_env_bool_rejects_an_unknown_word_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(ValueError, match=r"DEBUG='maybe' is not a boolean"):
        env_bool("DEBUG", False)


def test_env_list_splits_and_trims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOWED_HOSTS", " pacer.example , localhost,, ")
    assert env_list("ALLOWED_HOSTS", []) == ["pacer.example", "localhost"]
