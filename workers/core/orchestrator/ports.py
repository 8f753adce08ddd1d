"""The orchestrator's I/O, injected: where batches are written, where the trainer's
acknowledgements come from, and who hears about decisions, steps and evaluation waves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from workers.core.decisions import Decision
from workers.core.orchestrator.batches import Batch, EvalReport, StepReport, WaveStart


class BatchWriter(Protocol):
    def written_steps(self) -> set[int]:
        """Steps already on disk: a resumed run never writes them again."""
        ...

    def path_of(self, step: int) -> str:
        """Where ``step``'s batch goes, named by its report before it is written."""
        ...

    def write(self, batch: Batch, report: StepReport) -> None:
        """Write the batch and its step's report whole or not at all (a resumed run rebuilds
        a step's record from the report). Called off the event loop."""
        ...


@dataclass(frozen=True, slots=True)
class Ack:
    """A trainer's acknowledgement of a step: the policy version it trained to, and the
    folder holding that version's weights (checked as loadable before it got here), which the
    engines are to serve; None when the trainer sends no weights back."""

    version: int
    checkpoint: str | None = None


class Acknowledgements(Protocol):
    async def wait(self, step: int) -> Ack:
        """Until the trainer acknowledges ``step``; its acknowledgement then. The orchestrator
        bounds the wait with the config's ``ack_timeout_s``."""
        ...


class RunReporter(Protocol):
    def decisions(self, decisions: tuple[Decision, ...]) -> None: ...

    def step(self, report: StepReport) -> None: ...

    def eval_started(self, start: WaveStart) -> None: ...

    def eval(self, report: EvalReport) -> None: ...


class QuietReporter:
    """Hears everything, says nothing: for runs whose caller reads the results itself."""

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        return None

    def step(self, report: StepReport) -> None:
        return None

    def eval_started(self, start: WaveStart) -> None:
        return None

    def eval(self, report: EvalReport) -> None:
        return None
