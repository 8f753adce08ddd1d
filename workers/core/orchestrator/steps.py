"""What happened to episodes between two written steps, and the step's report from it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workers.core.dispatch.episodes import FinishedEpisode
from workers.core.dispatch.permits import EpisodeKind, PermitOutcome
from workers.core.orchestrator.batches import Sample, StepReport, mean_and_std


@dataclass(slots=True)
class StepTally:
    started_at: float  # the previous step's end, or the run's start
    generated_tokens: int = 0
    finished_train: int = 0
    finished_eval: int = 0
    failed: int = 0
    cancelled: int = 0
    dropped_groups: int = 0
    last_error: str | None = None  # the latest failure, for the step's warning

    def count(self, finished: FinishedEpisode[Any, Any]) -> None:
        if finished.outcome is PermitOutcome.COMPLETED and finished.result is not None:
            self.generated_tokens += finished.result.tokens
            if finished.ticket.kind is EpisodeKind.TRAIN:
                self.finished_train += 1
            else:
                self.finished_eval += 1
        elif finished.outcome is PermitOutcome.FAILED:
            self.failed += 1
            self.last_error = f"{type(finished.error).__name__}: {finished.error}"
        else:
            self.cancelled += 1

    def report(
        self,
        *,
        step: int,
        written_at: float,
        policy_version: int,
        samples: Sequence[Sample],
        cap: int,
        inflight: int,
        path: str,
    ) -> StepReport:
        reward_mean, reward_std = mean_and_std([s.episode.reward for s in samples])
        return StepReport(
            step=step,
            started_at=self.started_at,
            written_at=written_at,
            policy_version=policy_version,
            episodes=len(samples),
            tokens=sum(sample.episode.tokens for sample in samples),
            reward_mean=reward_mean,
            reward_std=reward_std,
            generated_tokens=self.generated_tokens,
            finished_train=self.finished_train,
            finished_eval=self.finished_eval,
            failed=self.failed,
            cancelled=self.cancelled,
            dropped_groups=self.dropped_groups,
            cap=cap,
            inflight=inflight,
            path=path,
            sampled_versions=sampled_versions(samples),
        )


def sampled_versions(samples: Sequence[Sample]) -> dict[str, int]:
    """How many samples each oldest version has, oldest first; keys are strings for JSON."""
    counts = Counter(sample.sampled_version for sample in samples)
    return {str(version): counts[version] for version in sorted(counts)}
