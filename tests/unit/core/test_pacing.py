"""Admission pacing: paid admissions per window; refilled completions earn free replacements."""

from __future__ import annotations

import pytest

from workers.core.dispatch.pacing import AdmissionPacer, PacingConfig


def test_budget_is_the_larger_of_a_group_and_a_tenth_of_the_cap() -> None:
    pacer = AdmissionPacer()
    assert pacer.budget(cap=1000, group_size=8) == 100
    assert pacer.budget(cap=40, group_size=8) == 8


def test_admissions_use_up_the_window_and_free_it_as_they_age_out() -> None:
    pacer = AdmissionPacer()
    pacer.admit(0.0, 60)
    pacer.admit(2.0, 40)
    assert pacer.available(4.9, cap=1000, group_size=8) == 0
    assert pacer.next_expiry() == 5.0
    assert pacer.available(5.0, cap=1000, group_size=8) == 60
    assert pacer.available(7.0, cap=1000, group_size=8) == 100
    assert pacer.next_expiry() is None


def test_a_natural_completion_pays_for_its_replacement() -> None:
    pacer = AdmissionPacer()
    pacer.admit(0.0, 100)
    pacer.refund()
    pacer.refund()
    assert pacer.available(1.0, cap=1000, group_size=8) == 2
    pacer.admit(1.0, 2)
    assert (pacer.paid(1.0), pacer.credits) == (100, 0)


def test_a_credit_does_not_expire_with_the_window() -> None:
    pacer = AdmissionPacer()
    pacer.admit(0.0, 100)
    pacer.refund()
    assert pacer.available(4.0, cap=1000, group_size=8) == 1
    pacer.admit(6.0, 1)  # the replacement comes after the window slid: still free
    assert pacer.paid(6.0) == 0


def test_credits_never_exceed_the_free_room() -> None:
    pacer = AdmissionPacer()
    for _ in range(500):
        pacer.refund()
    pacer.fit(64)
    assert pacer.available(0.0, cap=64, group_size=8) == 64 + 8
    pacer.fit(-3)  # a pool above its cap has no free slot
    assert pacer.credits == 0


def test_invalid_settings_and_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        PacingConfig(window=0.0)
    with pytest.raises(ValueError, match="cap_fraction"):
        PacingConfig(cap_fraction=2.0)
    with pytest.raises(ValueError, match="admit count"):
        AdmissionPacer().admit(0.0, 0)


def test_the_budget_has_grown_at_the_very_instant_next_expiry_names() -> None:
    # 0.1 + 5.0 - 5.0 < 0.1 in floating point: a timer woken by a clock standing at
    # next_expiry() must still find the admission gone, or it re-arms for ever.
    pacer = AdmissionPacer()
    pacer.admit(0.1, 8)
    expiry = pacer.next_expiry()
    assert expiry is not None
    assert pacer.available(expiry, cap=10, group_size=8) == 8
    assert pacer.next_expiry() is None
