"""Permits: released exactly once, counted per kind and engine, never expired."""

from __future__ import annotations

import pytest

from workers.core.dispatch.permits import EpisodeKind, PermitError, PermitLedger, PermitOutcome


def test_train_and_eval_share_one_count() -> None:
    ledger = PermitLedger()
    ledger.issue(EpisodeKind.TRAIN, "a", 0.0)
    ledger.issue(EpisodeKind.EVAL, "a", 0.0)
    ledger.issue(EpisodeKind.TRAIN, "b", 0.0)
    assert ledger.inflight == 3
    assert (ledger.inflight_of(EpisodeKind.TRAIN), ledger.inflight_of(EpisodeKind.EVAL)) == (2, 1)
    assert ledger.engines() == {"a": 2, "b": 1}


def test_a_permit_is_released_exactly_once_with_its_outcome() -> None:
    ledger = PermitLedger()
    permit = ledger.issue(EpisodeKind.TRAIN, "a", 0.0)
    permit.release(PermitOutcome.CANCELLED)
    assert (permit.outcome, ledger.inflight) == (PermitOutcome.CANCELLED, 0)
    with pytest.raises(PermitError, match="already released as cancelled"):
        permit.release(PermitOutcome.COMPLETED)
    assert ledger.inflight == 0
    assert ledger.engines() == {}


def test_train_episodes_are_counted_per_engine_apart_from_eval() -> None:
    ledger = PermitLedger()
    train = ledger.issue(EpisodeKind.TRAIN, "a", 0.0)
    ledger.issue(EpisodeKind.EVAL, "a", 0.0)
    ledger.issue(EpisodeKind.TRAIN, "b", 0.0)
    assert (ledger.engines(), ledger.train_engines()) == ({"a": 2, "b": 1}, {"a": 1, "b": 1})
    train.release(PermitOutcome.COMPLETED)
    assert (ledger.engines(), ledger.train_engines()) == ({"a": 1, "b": 1}, {"b": 1})
