"""Steps, evaluation waves and cap decisions logged to Weights & Biases.

``offline`` (the default) writes the run under ``<output>/wandb/`` with no account and no
network, to sync later with ``wandb sync``; ``disabled`` logs nothing; ``online`` needs the
usual W&B login. W&B is imported only when used: it takes seconds to start.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workers.core.config.run import WandbSettings
from workers.core.decisions import Decision
from workers.core.orchestrator.batches import EvalReport, StepReport, WaveStart


class WandbLog:
    def __init__(
        self, settings: WandbSettings, *, name: str, folder: Path, config: Mapping[str, Any]
    ) -> None:
        self._run: Any = None
        if settings.mode == "disabled":
            return
        import wandb

        self._run = wandb.init(
            project=settings.project,
            name=name,
            mode=settings.mode,
            dir=str(folder),
            config=dict(config),
            settings=wandb.Settings(silent=True, console="off"),
        )

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        if self._run is None:
            return
        for decision in decisions:
            self._run.log(
                {"concurrency/cap": decision.cap_after, "concurrency/shed": decision.shed},
                commit=False,
            )

    def step(self, report: StepReport) -> None:
        if self._run is None:
            return
        self._run.log(
            {
                "step/reward_mean": report.reward_mean,
                "step/reward_std": report.reward_std,
                "step/episodes": report.episodes,
                "step/tokens": report.tokens,
                "step/seconds": report.seconds,
                "step/tokens_per_second": report.tokens_per_second,
                "step/failed": report.failed,
                "step/cancelled": report.cancelled,
                "step/dropped_groups": report.dropped_groups,
                "step/policy_version": report.policy_version,
                "concurrency/cap": report.cap,
                "concurrency/inflight": report.inflight,
            },
            step=report.step,
        )

    def eval_started(self, start: WaveStart) -> None:
        return None  # W&B charts finished waves

    def eval(self, report: EvalReport) -> None:
        if self._run is None:
            return
        figures: dict[str, float] = {}
        for env, reward in report.reward_mean.items():
            figures[f"eval/{env}/reward_mean"] = reward
            figures[f"eval/{env}/episodes"] = report.episodes.get(env, 0)
            figures[f"eval/{env}/failed"] = report.failed.get(env, 0)
        self._run.log(figures, commit=False)

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
