"""Reporters for runs outside a worker: progress lines on a terminal, JSON lines on disk,
and a fan-out to several of them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from workers.core.clock import Clock
from workers.core.decisions import Decision
from workers.core.orchestrator.batches import EvalReport, StepReport, WaveStart
from workers.core.orchestrator.ports import RunReporter


class FanOut:
    """Every report to every reporter, in order."""

    def __init__(self, reporters: Sequence[RunReporter]) -> None:
        self._reporters = tuple(reporters)

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        for reporter in self._reporters:
            reporter.decisions(decisions)

    def step(self, report: StepReport) -> None:
        for reporter in self._reporters:
            reporter.step(report)

    def eval_started(self, start: WaveStart) -> None:
        for reporter in self._reporters:
            reporter.eval_started(start)

    def eval(self, report: EvalReport) -> None:
        for reporter in self._reporters:
            reporter.eval(report)


class Progress:
    """One line per step and per decision, timed from the run's start."""

    def __init__(self, out: IO[str], clock: Clock, max_steps: int) -> None:
        self._out = out
        self._clock = clock
        self._start = clock.now()
        self._max_steps = max_steps

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        for decision in decisions:
            self._line(f"{decision.kind.value}: {decision.reason}", decision.at)

    def step(self, report: StepReport) -> None:
        self._line(
            f"step {report.step}/{self._max_steps}: {report.episodes} episodes, "
            f"{report.tokens_per_second:,.0f} tokens/s, cap {report.cap} "
            f"({report.inflight} in flight), reward {report.reward_mean:.3f} "
            f"± {report.reward_std:.3f}, {report.seconds:.1f} s"
            + (f", {report.failed} failed" if report.failed else ""),
            report.written_at,
        )

    def eval_started(self, start: WaveStart) -> None:
        return None  # its eval-wave decision has a line

    def eval(self, report: EvalReport) -> None:
        rewards = ", ".join(f"{env} {reward:.3f}" for env, reward in report.reward_mean.items())
        episodes = sum(report.episodes.values())
        self._line(
            f"eval wave {report.wave} (after step {report.after_step}): {episodes} episodes, "
            f"reward {rewards or 'none'}",
            report.finished_at,
        )

    def _line(self, text: str, at: float) -> None:
        self._out.write(f"[{at - self._start:8.1f} s] {text}\n")
        self._out.flush()


class JsonLines:
    """decisions.jsonl, steps.jsonl and evals.jsonl in a run's folder, one record a line."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._files = {
            name: (folder / f"{name}.jsonl").open("a") for name in ("decisions", "steps", "evals")
        }

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        for decision in decisions:
            self._write("decisions", decision.to_json())

    def step(self, report: StepReport) -> None:
        self._write("steps", dataclasses.asdict(report))

    def eval_started(self, start: WaveStart) -> None:
        return None  # evals.jsonl holds finished waves

    def eval(self, report: EvalReport) -> None:
        self._write("evals", dataclasses.asdict(report))

    def close(self) -> None:
        for file in self._files.values():
            file.close()

    def _write(self, name: str, record: dict[str, Any]) -> None:
        file = self._files[name]
        file.write(json.dumps(record) + "\n")
        file.flush()
