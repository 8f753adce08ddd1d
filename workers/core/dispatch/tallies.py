"""Episode counts per (kind, environment, engine), for the dashboard and Prometheus."""

from __future__ import annotations

from dataclasses import dataclass

from workers.core.dispatch.episodes import CancelReason
from workers.core.dispatch.permits import EpisodeKind, PermitOutcome


@dataclass(frozen=True, slots=True)
class TallyKey:
    kind: EpisodeKind
    env: str
    engine_id: str


@dataclass(frozen=True, slots=True)
class Tally:
    """Counts of one (kind, env, engine) since the dispatcher started."""

    admitted: int = 0
    completed: int = 0
    failed: int = 0
    shed: int = 0  # cancelled to shed load
    off_policy: int = 0  # cancelled as too far behind the policy
    dropped: int = 0  # cancelled with a group that lost a member
    closed: int = 0  # cancelled at shutdown
    engine_left: int = 0  # cancelled on an engine taken out of the run, at its deadline


_COLUMNS: dict[PermitOutcome | CancelReason, int] = {
    PermitOutcome.COMPLETED: 1,
    PermitOutcome.FAILED: 2,
    CancelReason.SHED: 3,
    CancelReason.OFF_POLICY: 4,
    CancelReason.DROPPED: 5,
    CancelReason.CLOSED: 6,
    CancelReason.ENGINE_LEFT: 7,
}


class Tallies:
    """Mutable counters behind immutable snapshots; keyed by plain tuples for speed."""

    def __init__(self) -> None:
        self._rows: dict[tuple[EpisodeKind, str, str], list[int]] = {}

    def admitted(self, kind: EpisodeKind, env: str, engine_id: str) -> None:
        self._row(kind, env, engine_id)[0] += 1

    def ended(
        self,
        kind: EpisodeKind,
        env: str,
        engine_id: str,
        outcome: PermitOutcome,
        reason: CancelReason | None,
    ) -> None:
        if outcome is PermitOutcome.CANCELLED:
            if reason is None:
                raise ValueError("a cancelled episode is counted under its cancel reason")
            column = _COLUMNS[reason]
        else:
            column = _COLUMNS[outcome]
        self._row(kind, env, engine_id)[column] += 1

    def snapshot(self) -> dict[TallyKey, Tally]:
        return {TallyKey(*key): Tally(*row) for key, row in self._rows.items()}

    def _row(self, kind: EpisodeKind, env: str, engine_id: str) -> list[int]:
        key = (kind, env, engine_id)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = [0] * 8
        return row
