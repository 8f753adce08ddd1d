"""The host's tenure: its local deadline runs from when a renewal was sent, never from when
the database answered, and ends early when another host holds the lease."""

from __future__ import annotations

import pytest

from workers.core.clock import ManualClock
from workers.runtime.tenure import LEASE_MARGIN_S, Tenure, TenureLost

TTL_S = 20.0


def test_the_deadline_is_the_ttl_less_the_margin_from_when_the_lease_was_asked_for() -> None:
    clock = ManualClock(100.0)
    tenure = Tenure(clock, taken_at=99.0, ttl_s=TTL_S)
    assert tenure.deadline == 99.0 + TTL_S - LEASE_MARGIN_S
    clock.advance(tenure.deadline - clock.now() - 0.01)
    assert tenure.held
    clock.advance(0.02)
    assert not tenure.held
    with pytest.raises(TenureLost, match="could not be renewed in time"):
        tenure.check()


def test_a_renewal_counts_from_when_it_was_sent_however_late_it_answers() -> None:
    clock = ManualClock(0.0)
    tenure = Tenure(clock, taken_at=0.0, ttl_s=TTL_S)
    sent_at = 10.0
    clock.advance(14.0)  # the renewal sent at 10 s answers at 14 s
    tenure.renewed(sent_at)
    assert tenure.deadline == sent_at + TTL_S - LEASE_MARGIN_S
    tenure.renewed(5.0)  # an older renewal answering last never shortens the tenure
    assert tenure.deadline == sent_at + TTL_S - LEASE_MARGIN_S


def test_a_lease_held_by_another_ends_the_tenure_at_once() -> None:
    clock = ManualClock(0.0)
    tenure = Tenure(clock, taken_at=0.0, ttl_s=TTL_S)
    tenure.lose("another host holds the lease")
    tenure.renewed(0.0)
    assert not tenure.held
    with pytest.raises(TenureLost, match="another host holds the lease"):
        tenure.check()
