"""Episode counts per (kind, env, engine)."""

from __future__ import annotations

import pytest

from workers.core.dispatch.episodes import CancelReason
from workers.core.dispatch.permits import EpisodeKind, PermitOutcome
from workers.core.dispatch.tallies import Tallies, Tally, TallyKey

TRAIN, EVAL = EpisodeKind.TRAIN, EpisodeKind.EVAL


def test_counts_are_kept_per_kind_env_and_engine() -> None:
    tallies = Tallies()
    for _ in range(3):
        tallies.admitted(TRAIN, "math", "a")
    tallies.admitted(EVAL, "math", "a")
    tallies.ended(TRAIN, "math", "a", PermitOutcome.COMPLETED, None)
    tallies.ended(TRAIN, "math", "a", PermitOutcome.FAILED, None)
    tallies.ended(TRAIN, "math", "a", PermitOutcome.CANCELLED, CancelReason.SHED)
    tallies.ended(EVAL, "math", "a", PermitOutcome.CANCELLED, CancelReason.OFF_POLICY)
    assert tallies.snapshot() == {
        TallyKey(TRAIN, "math", "a"): Tally(admitted=3, completed=1, failed=1, shed=1),
        TallyKey(EVAL, "math", "a"): Tally(admitted=1, off_policy=1),
    }


def test_a_cancellation_needs_its_reason() -> None:
    with pytest.raises(ValueError, match="cancel reason"):
        Tallies().ended(TRAIN, "math", "a", PermitOutcome.CANCELLED, None)
