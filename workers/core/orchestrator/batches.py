"""What a step produces: its batch of scored samples, and the reports of steps and
evaluation waves."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workers.core.environments.base import Episode

ADVANTAGE_EPSILON = 1e-6  # below this spread a group's rewards are equal: no signal, all zeros


@dataclass(frozen=True, slots=True)
class Sample:
    """One episode in a batch, with its group-normalised advantage."""

    group_id: str
    index: int  # position in its group
    env: str
    engine: str
    policy_version: int  # the trainer's version when its group was dispatched
    episode: Episode
    advantage: float

    @property
    def sampled_version(self) -> int:
        """The oldest version any of its turns was sampled under, as the engines served
        them; the dispatch version when the turns carry none (no weights are relayed)."""
        return min(self.episode.turn_versions, default=self.policy_version)


@dataclass(frozen=True, slots=True)
class Batch:
    step: int  # 1 for the first
    policy_version: int  # the trainer's version when the batch was assembled
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class StepReport:
    """One written step, for progress lines, the database and the dashboard."""

    step: int
    started_at: float  # clock seconds: the previous step's end, or the run's start
    written_at: float
    policy_version: int
    episodes: int  # in the batch
    tokens: int  # generated tokens of the batch's episodes
    reward_mean: float
    reward_std: float
    generated_tokens: int  # by every episode finished during the step, kept or not
    finished_train: int  # train episodes that completed during the step
    finished_eval: int
    failed: int  # episodes that failed during the step
    cancelled: int  # episodes cancelled during the step (shed, off-policy)
    dropped_groups: int  # groups lost to a failed or cancelled member during the step
    cap: int
    inflight: int
    path: str  # where the batch was written
    # Samples per policy version their oldest turn was sampled under ({"3": 48, "2": 16}):
    # in rolling updates part of a batch is a version behind, and this says how much.
    sampled_versions: dict[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.written_at - self.started_at

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class WaveStart:
    """An evaluation wave as it starts: recorded then, so a run stopped before the wave ends
    knows to run it again."""

    wave: int
    after_step: int
    policy_version: int  # the checkpoint it measures
    started_at: float


@dataclass(frozen=True, slots=True)
class EvalReport:
    """One finished evaluation wave."""

    wave: int
    after_step: int
    policy_version: int
    started_at: float
    finished_at: float
    episodes: Mapping[str, int]  # completed, per environment
    failed: Mapping[str, int]
    reward_mean: Mapping[str, float]


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """Each reward against its group's: (r - mean) / std, all zeros when the group agrees
    (GRPO's normalisation; a group whose rollouts all scored alike teaches nothing)."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std < ADVANTAGE_EPSILON:
        return [0.0] * len(rewards)
    return [(r - mean) / std for r in rewards]


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
