"""The groups the dispatcher serves: which goes next, and which are shed first.

A group (the rollouts of one prompt) is admitted, routed, shed and dropped as a whole. Started
groups are served before new ones, because their prefixes are cached on their engine; new eval
groups before new train groups, so an evaluation wave measures the policy it was started for
instead of queueing behind the training it shares the pool with; each kind in submission
order. Shedding takes train groups youngest first, a group's age being its oldest
live member's start, so that the episodes cancelled are the ones that have done the least work.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.core.dispatch.episodes import CancelReason, EpisodeTicket, GroupSpec
from workers.core.dispatch.permits import EpisodeKind, Permit


@dataclass(slots=True, eq=False)
class LiveEpisode:
    """An admitted episode: its permit, its task, and why it was cancelled if it was."""

    ticket: EpisodeTicket[Any]
    permit: Permit
    started_at: float
    task: asyncio.Task[Any] | None = None
    cancel_reason: CancelReason | None = None  # the first reason only: a later one is moot


@dataclass(slots=True, eq=False)
class Group:
    spec: GroupSpec[Any]
    order: int  # submission order, to break ties between groups of equal age
    engine_id: str | None = None
    next_index: int = 0
    closed: bool = False
    live: dict[int, LiveEpisode] = field(default_factory=dict)

    @property
    def remaining(self) -> int:
        return 0 if self.closed else self.spec.size - self.next_index

    def age_key(self) -> tuple[float, int]:
        """A group's age is its oldest live member's start."""
        return (min(live.started_at for live in self.live.values()), self.order)


class GroupQueue:
    """Every group with episodes still to admit or still running, in serving order."""

    __slots__ = ("_continuing", "_fresh", "_groups", "_order", "_pending")

    def __init__(self) -> None:
        self._groups: dict[str, Group] = {}
        # Not started, in submission order, one queue per kind: eval is served first.
        self._fresh: dict[EpisodeKind, deque[Group]] = {
            EpisodeKind.EVAL: deque(),
            EpisodeKind.TRAIN: deque(),
        }
        self._continuing: dict[str, Group] = {}  # started, with episodes left to admit
        self._order = 0
        self._pending = 0  # episodes of open groups not yet admitted, kept as they change

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._groups

    def __len__(self) -> int:
        return len(self._groups)

    def get(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def groups(self) -> list[Group]:
        """The groups held now (a copy: closing one may drop it)."""
        return list(self._groups.values())

    @property
    def pending_episodes(self) -> int:
        """Episodes queued, not yet admitted: read after every completion, so kept, not summed."""
        return self._pending

    def add(self, spec: GroupSpec[Any]) -> None:
        self._order += 1
        group = Group(spec, self._order)
        self._groups[spec.group_id] = group
        self._fresh[spec.kind].append(group)
        self._pending += spec.size

    def next(self) -> Group | None:
        """Started groups first (their prefixes are cached on their engine), then new eval
        groups, then new train groups, each in submission order."""
        if self._continuing:
            return next(iter(self._continuing.values()))
        for fresh in self._fresh.values():
            while fresh and fresh[0].closed:
                fresh.popleft()
            if fresh:
                return fresh[0]
        return None

    def admit(self, group: Group, count: int) -> range:
        """Take the next ``count`` episodes of ``group`` (the one ``next`` gave); their indices."""
        spec = group.spec
        if group.next_index == 0:
            self._fresh[spec.kind].popleft()
            self._continuing[spec.group_id] = group
        indices = range(group.next_index, group.next_index + count)
        group.next_index += count
        self._pending -= count
        if group.remaining == 0:
            del self._continuing[spec.group_id]
        return indices

    def ended(self, group: Group, index: int) -> None:
        """An episode left the pool; a group with nothing left is forgotten."""
        del group.live[index]
        if not group.live and group.remaining == 0:
            self._groups.pop(group.spec.group_id, None)

    def close(self, group: Group) -> None:
        """No more admissions for ``group``; it is forgotten once its live episodes end."""
        self._pending -= group.remaining
        group.closed = True
        self._continuing.pop(group.spec.group_id, None)
        if not group.live:
            self._groups.pop(group.spec.group_id, None)

    def victims(self) -> list[Group]:
        """Open train groups with live episodes, youngest first: the order of shedding.

        Eval groups are never shed: an eval wave is a measurement, and a partial one measures
        nothing.
        """
        found = [
            g
            for g in self._groups.values()
            if g.spec.kind is EpisodeKind.TRAIN and not g.closed and g.live
        ]
        return sorted(found, key=Group.age_key, reverse=True)

    def open_where(self, test: Callable[[GroupSpec[Any]], bool]) -> list[Group]:
        return [g for g in self._groups.values() if not g.closed and test(g.spec)]
