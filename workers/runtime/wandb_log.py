"""Steps, evaluation waves and cap decisions logged to Weights & Biases.

``offline`` (the default) writes the run under ``<output>/wandb/`` with no account and no
network, to sync later with ``wandb sync``; ``disabled`` logs nothing; ``online`` needs the
usual W&B login. W&B is imported only when used: it takes seconds to start.

A worker hosts several runs in one process (Celery's thread pool), and ``wandb.init`` by
default returns the process's active W&B run when there is one: the second run then logged
into the first's, and when either finished it finished both, so the other's next log raised
``UsageError`` and ended that run. So each run makes a W&B run of its own
(``reinit="create_new"``: other active runs are left alone, the global ``wandb.run`` is not
touched) and logs through that object only, in its own folder.

W&B is a side record: a failure in it (init, log or finish) is logged with its traceback and
turns W&B off for that run, which goes on. Off rather than retried: a W&B run that raised
once (finished, its service gone) raises at every call, and a run logs every step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workers.core.config.run import WandbSettings
from workers.core.decisions import Decision
from workers.core.orchestrator.batches import EvalReport, StepReport, WaveStart

logger = logging.getLogger(__name__)


class WandbLog:
    def __init__(
        self, settings: WandbSettings, *, name: str, folder: Path, config: Mapping[str, Any]
    ) -> None:
        self._run: Any = None
        if settings.mode == "disabled":
            return
        try:
            import wandb

            self._run = wandb.init(
                project=settings.project,
                name=name,
                mode=settings.mode,
                dir=str(folder),
                config=dict(config),
                reinit="create_new",
                settings=wandb.Settings(silent=True, console="off"),
            )
        except Exception:
            logger.exception("W&B: the run could not start; the run goes on without W&B")

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        def log(run: Any) -> None:
            for decision in decisions:
                run.log(
                    {"concurrency/cap": decision.cap_after, "concurrency/shed": decision.shed},
                    commit=False,
                )

        self._call("log decisions", log)

    def step(self, report: StepReport) -> None:
        figures = {
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
        }
        self._call(f"log step {report.step}", lambda run: run.log(figures, step=report.step))

    def eval_started(self, start: WaveStart) -> None:
        return None  # W&B charts finished waves

    def eval(self, report: EvalReport) -> None:
        figures: dict[str, float] = {}
        for env, reward in report.reward_mean.items():
            figures[f"eval/{env}/reward_mean"] = reward
            figures[f"eval/{env}/episodes"] = report.episodes.get(env, 0)
            figures[f"eval/{env}/failed"] = report.failed.get(env, 0)
        self._call(f"log eval wave {report.wave}", lambda run: run.log(figures, commit=False))

    def close(self) -> None:
        self._call("finish", lambda run: run.finish())
        self._run = None

    def _call(self, what: str, action: Callable[[Any], None]) -> None:
        """``action`` on this run's W&B run, if it has one; a failure turns W&B off."""
        if self._run is None:
            return
        try:
            action(self._run)
        except Exception:
            self._run = None
            logger.exception("W&B: %s failed; W&B is off for this run, which goes on", what)
