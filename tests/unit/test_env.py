"""Settings read from the environment: typos are errors, not silent defaults."""

from __future__ import annotations

import pytest

from controlplane.env import env_bool, env_float, env_int, env_list


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


def test_env_int_reads_a_whole_number_at_least_its_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_int("PACER_N", 10, minimum=1) == 10
    monkeypatch.setenv("PACER_N", " 7 ")
    assert env_int("PACER_N", 10, minimum=1) == 7
    monkeypatch.setenv("PACER_N", "7s")
    with pytest.raises(ValueError, match=r"PACER_N='7s' is not a whole number"):
        env_int("PACER_N", 10, minimum=1)
    monkeypatch.setenv("PACER_N", "0")
    with pytest.raises(ValueError, match=r"PACER_N='0': must be at least 1"):
        env_int("PACER_N", 10, minimum=1)


def test_env_float_reads_a_number_above_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_float("PACER_S", 15.0, above=5) == 15.0
    monkeypatch.setenv("PACER_S", "5.5")
    assert env_float("PACER_S", 15.0, above=5) == 5.5
    refusals = {"soon": " is not a number", "5": ": must be above 5", "nan": ": must be above 5"}
    for raw, why in refusals.items():
        monkeypatch.setenv("PACER_S", raw)
        with pytest.raises(ValueError, match=f"PACER_S='{raw}'{why}"):
            env_float("PACER_S", 15.0, above=5)
