"""Permits: one per episode in flight, the only thing the in-flight count is made of.

A permit leaves the count only when its episode ends and releases it, with the outcome. There
is no timer: an episode that runs for an hour still holds its permit (llm-d once expired
in-flight counts on a five-minute timer, and real occupancy ran from ~28 to ~1,700).
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum


class EpisodeKind(StrEnum):
    """Why an episode runs; train and eval share one pool of permits."""

    TRAIN = "train"
    EVAL = "eval"


class PermitOutcome(StrEnum):
    """How an episode ended."""

    COMPLETED = "completed"  # ran to its end: a natural completion
    CANCELLED = "cancelled"  # cancelled by the dispatcher (shed, off-policy, shutdown)
    FAILED = "failed"  # raised an error (engine error, timeout)


class PermitError(RuntimeError):
    """A permit was misused, e.g. released twice."""


class Permit:
    """The right of one episode to be in flight; released exactly once."""

    __slots__ = ("_ledger", "engine_id", "issued_at", "kind", "outcome")

    def __init__(
        self, ledger: PermitLedger, kind: EpisodeKind, engine_id: str, issued_at: float
    ) -> None:
        self._ledger = ledger
        self.kind = kind
        self.engine_id = engine_id
        self.issued_at = issued_at
        self.outcome: PermitOutcome | None = None

    def release(self, outcome: PermitOutcome) -> None:
        if self.outcome is not None:
            raise PermitError(
                f"permit on {self.engine_id} already released as {self.outcome.value}; "
                f"second release as {outcome.value} refused"
            )
        self.outcome = outcome
        self._ledger._return(self)


class PermitLedger:
    """Counts permits in flight, in total, per kind and per engine."""

    def __init__(self) -> None:
        self._inflight = 0
        self._by_kind: Counter[EpisodeKind] = Counter()
        self._by_engine: Counter[str] = Counter()
        self._train_by_engine: Counter[str] = Counter()

    @property
    def inflight(self) -> int:
        return self._inflight

    def inflight_of(self, kind: EpisodeKind) -> int:
        return self._by_kind[kind]

    def inflight_on(self, engine_id: str) -> int:
        return self._by_engine[engine_id]

    def engines(self) -> dict[str, int]:
        """In-flight count per engine holding any permit."""
        return {engine: n for engine, n in self._by_engine.items() if n > 0}

    def train_engines(self) -> dict[str, int]:
        """In-flight train episodes per engine holding any."""
        return {engine: n for engine, n in self._train_by_engine.items() if n > 0}

    def issue(self, kind: EpisodeKind, engine_id: str, now: float) -> Permit:
        self._inflight += 1
        self._by_kind[kind] += 1
        self._by_engine[engine_id] += 1
        if kind is EpisodeKind.TRAIN:
            self._train_by_engine[engine_id] += 1
        return Permit(self, kind, engine_id, now)

    def _return(self, permit: Permit) -> None:
        self._inflight -= 1
        self._by_kind[permit.kind] -= 1
        self._by_engine[permit.engine_id] -= 1
        if permit.kind is EpisodeKind.TRAIN:
            self._train_by_engine[permit.engine_id] -= 1
