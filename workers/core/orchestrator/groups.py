"""Groups in flight: finished episodes land here, and whole, scored groups come out.

A train group counts only whole: its advantages compare every rollout of one prompt, so a
group that lost a member (a failed episode, a cancellation) is dropped, and what is left of
it is cancelled by the caller. An eval group (one episode) counts toward its wave whatever
happened to it, so a wave always ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from workers.core.dispatch.episodes import FinishedEpisode
from workers.core.dispatch.permits import EpisodeKind, PermitOutcome
from workers.core.environments.base import Episode
from workers.core.orchestrator.batches import Sample, group_advantages, mean_and_std


@dataclass(frozen=True, slots=True)
class EpisodeSpec:
    """The dispatcher's payload for one episode: what to run, and with which seed."""

    env: str
    task_seed: int  # shared by a group's rollouts: the same prompt
    seed: int  # this rollout's own


@dataclass(slots=True)
class OpenGroup:
    group_id: str
    kind: EpisodeKind
    env: str
    policy_version: int
    size: int
    wave: int | None = None  # the evaluation wave of an eval group
    done: dict[int, FinishedEpisode[EpisodeSpec, Episode]] = field(default_factory=dict)


@dataclass(slots=True)
class Wave:
    """One evaluation wave: how many episodes it started, and how they ended."""

    number: int
    after_step: int
    policy_version: int
    started_at: float
    expected: int
    ended: int = 0
    rewards: dict[str, list[float]] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)

    @property
    def over(self) -> bool:
        return self.ended >= self.expected


@dataclass(frozen=True, slots=True)
class Ended:
    """What one finished episode did to the book."""

    completed_group: tuple[Sample, ...] = ()  # a train group, scored, when it just completed
    broken_group: str | None = None  # a train group that just lost a member
    wave: Wave | None = None  # an eval wave that just ended


class GroupBook:
    def __init__(self) -> None:
        self._open: dict[str, OpenGroup] = {}
        self.ready: deque[tuple[Sample, ...]] = deque()  # scored train groups, oldest first
        self.waves: dict[int, Wave] = {}

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._open

    @property
    def ready_episodes(self) -> int:
        return sum(len(group) for group in self.ready)

    def open(self, group: OpenGroup) -> None:
        self._open[group.group_id] = group

    def open_train(self) -> list[str]:
        """Train groups still collecting episodes."""
        return [g.group_id for g in self._open.values() if g.kind is EpisodeKind.TRAIN]

    def forget(self, group_ids: Iterable[str]) -> None:
        """Groups the dispatcher dropped (off-policy): they will never complete."""
        for group_id in group_ids:
            self._open.pop(group_id, None)

    def ended(self, finished: FinishedEpisode[EpisodeSpec, Any]) -> Ended:
        group = self._open.get(finished.ticket.group_id)
        if group is None:
            return Ended()  # the rest of a dropped group
        if group.kind is EpisodeKind.EVAL:
            return Ended(wave=self._count_eval(group, finished))
        if finished.outcome is not PermitOutcome.COMPLETED:
            del self._open[group.group_id]
            return Ended(broken_group=group.group_id)
        group.done[finished.ticket.index] = finished
        if len(group.done) < group.size:
            return Ended()
        del self._open[group.group_id]
        scored = _score(group)
        self.ready.append(scored)
        return Ended(completed_group=scored)

    def drop_behind(self, oldest: int) -> list[str]:
        """Scored groups with a turn sampled under a version older than ``oldest`` (the
        off-policy bound, on the versions the engines served): dropped from the ready ones;
        their ids."""
        kept: deque[tuple[Sample, ...]] = deque()
        dropped: list[str] = []
        for group in self.ready:
            if min(sample.sampled_version for sample in group) < oldest:
                dropped.append(group[0].group_id)
            else:
                kept.append(group)
        self.ready = kept
        return dropped

    def take(self, episodes: int) -> list[Sample]:
        """Whole groups, oldest first, up to ``episodes`` samples (ready holds enough)."""
        taken: list[Sample] = []
        while self.ready and len(taken) + len(self.ready[0]) <= episodes:
            taken.extend(self.ready.popleft())
        return taken

    def _count_eval(
        self, group: OpenGroup, finished: FinishedEpisode[EpisodeSpec, Any]
    ) -> Wave | None:
        del self._open[group.group_id]
        wave = self.waves.get(group.wave) if group.wave is not None else None
        if wave is None:
            return None
        wave.ended += 1
        if finished.outcome is PermitOutcome.COMPLETED and finished.result is not None:
            wave.rewards.setdefault(group.env, []).append(finished.result.reward)
        else:
            wave.failed[group.env] = wave.failed.get(group.env, 0) + 1
        if not wave.over:
            return None
        del self.waves[wave.number]
        return wave


def _score(group: OpenGroup) -> tuple[Sample, ...]:
    members = [group.done[index] for index in range(group.size)]
    episodes = [member.result for member in members]
    assert all(episode is not None for episode in episodes)
    advantages = group_advantages([e.reward for e in episodes])  # type: ignore[union-attr]
    return tuple(
        Sample(
            group_id=group.group_id,
            index=index,
            env=group.env,
            engine=member.engine_id,
            policy_version=group.policy_version,
            episode=episode,  # type: ignore[arg-type]
            advantage=advantage,
        )
        for index, (member, episode, advantage) in enumerate(
            zip(members, episodes, advantages, strict=True)
        )
    )


def wave_rewards(wave: Wave) -> dict[str, float]:
    return {env: mean_and_std(rewards)[0] for env, rewards in wave.rewards.items()}
