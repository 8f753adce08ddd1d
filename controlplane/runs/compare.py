"""Two to four runs side by side: their summaries and where their configs differ.

One query for the runs, each with the mean reward of its newest step as a subquery on the
``(run, step)`` index (as the runs list reads it), whatever the runs' sizes; their series
are read through the endpoints that already bound them (samples, steps, decisions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import OuterRef, Subquery

from controlplane.runs.config_diff import Difference, differences
from controlplane.runs.models import Run, StepRecord

MIN_RUNS, MAX_RUNS = 2, 4


class NoSuchRuns(LookupError):
    """Some of the runs asked for do not exist; ``missing`` names them."""

    def __init__(self, missing: Sequence[int]) -> None:
        self.missing = list(missing)
        names = ", ".join(str(m) for m in self.missing)
        super().__init__(f"no such run: {names}" if len(missing) == 1 else f"no such runs: {names}")


@dataclass(frozen=True, slots=True)
class Comparison:
    runs: list[Run]  # in the order asked, each with ``latest_reward`` (None before a step)
    differences: list[Difference]  # values in the same order as ``runs``


def compare_runs(run_ids: Sequence[int]) -> Comparison:
    newest_step = StepRecord.objects.filter(run=OuterRef("pk")).order_by("-step")
    found = {
        run.pk: run
        for run in Run.objects.filter(pk__in=run_ids).annotate(
            latest_reward=Subquery(newest_step.values("reward_mean")[:1])
        )
    }
    missing = [pk for pk in run_ids if pk not in found]
    if missing:
        raise NoSuchRuns(missing)
    runs = [found[pk] for pk in run_ids]
    return Comparison(runs, differences([run.config for run in runs]))
