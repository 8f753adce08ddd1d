"""What the dispatcher is given to run and what it hands back.

Episodes come in groups (the rollouts of one prompt, scored together): a group is admitted,
routed, shed and dropped as a whole. Payloads and results are the caller's own types; the
dispatcher only carries them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from workers.core.dispatch.permits import EpisodeKind, PermitOutcome

P = TypeVar("P")
R = TypeVar("R")


class CancelReason(StrEnum):
    """Why the dispatcher cancelled an episode."""

    SHED = "shed"  # the controller asked to shed load
    OFF_POLICY = "off-policy"  # its group fell more than max_off_policy_steps behind
    DROPPED = "dropped"  # its group lost a member: the rest of it would be wasted work
    CLOSED = "closed"  # the dispatcher shut down
    ENGINE_LEFT = "engine left"  # its engine was taken out of the run and its deadline passed


@dataclass(frozen=True, slots=True)
class GroupSpec(Generic[P]):
    """A group of episodes to run on one engine."""

    group_id: str
    kind: EpisodeKind
    env: str  # environment name, for counts
    policy_version: int  # policy version the group's episodes are sampled with
    payloads: tuple[P, ...]  # one per episode, handed to the run-episode callable

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must be a non-empty string")
        if not self.payloads:
            raise ValueError(f"group {self.group_id!r} has no episodes")
        if self.policy_version < 0:
            raise ValueError(f"policy_version must be >= 0, got {self.policy_version}")

    @property
    def size(self) -> int:
        return len(self.payloads)


@dataclass(frozen=True, slots=True)
class EpisodeTicket(Generic[P]):
    """One episode as the run-episode callable receives it."""

    group_id: str
    index: int  # position within the group
    kind: EpisodeKind
    env: str
    policy_version: int
    payload: P


@dataclass(frozen=True, slots=True)
class FinishedEpisode(Generic[P, R]):
    """One episode that left the pool, however it ended."""

    ticket: EpisodeTicket[P]
    engine_id: str
    outcome: PermitOutcome
    started_at: float
    finished_at: float
    pool: int  # in-flight count including this episode, just before its permit was released
    result: R | None  # the run-episode callable's return value, when it completed
    error: BaseException | None  # what it raised, when it failed
    cancel_reason: CancelReason | None  # why it was cancelled, when it was
