"""What a run's host reads from and writes to the database. Plain synchronous ORM calls, run
in the host's own database thread (Django's ORM is not for the event loop), each guarded by
the lease where it changes the run, so a host that lost its lease writes nothing more."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.runs.models import (
    Decision as DecisionRow,
)
from controlplane.runs.models import (
    Engine,
    EngineSample,
    EvalRecord,
    Override,
    Run,
    StepRecord,
)
from workers.core.decisions import Decision
from workers.core.orchestrator.batches import EvalReport, StepReport, WaveStart
from workers.core.orchestrator.orchestrator import OpenWave
from workers.runtime.batch_files import REPORT

logger = logging.getLogger(__name__)


def load_run(run_id: int) -> Run | None:
    return Run.objects.filter(pk=run_id).first()


def save_run(run_id: int, owner: str, **fields: Any) -> bool:
    """Update the run while we hold its lease; False (nothing written) when we do not."""
    return Run.objects.filter(pk=run_id, lease_owner=owner).update(**fields) == 1


def insert_decisions(
    run_id: int, step: int, decisions: Sequence[tuple[Decision, datetime]]
) -> list[int]:
    rows = DecisionRow.objects.bulk_create(
        [decision_row(run_id, step, decision, at) for decision, at in decisions]
    )
    return [row.pk for row in rows]


def decision_row(run_id: int, step: int, decision: Decision, at: datetime) -> DecisionRow:
    return DecisionRow(
        run_id=run_id,
        at=at,
        step=step,
        kind=decision.kind.value,
        cause=decision.cause.value,
        signal=decision.signal.value,
        cap_before=decision.cap_before,
        cap_after=decision.cap_after,
        reason=decision.reason,
        shed=decision.shed,
        shadow_before=decision.shadow_before,
        shadow_after=decision.shadow_after,
        alert=decision.alert,
        applied=decision.applied,
        figures=dict(decision.figures),
    )


def insert_samples(rows: Sequence[EngineSample]) -> None:
    EngineSample.objects.bulk_create(rows)


def insert_step(
    run_id: int, owner: str, report: StepReport, started: datetime, written: datetime
) -> bool:
    """The step's record and the run's position, in one transaction: a resumed run starts
    after the last step recorded here."""
    with transaction.atomic():
        if not save_run(run_id, owner, step=report.step):
            return False
        StepRecord.objects.update_or_create(
            run_id=run_id, step=report.step, defaults=step_fields(report, started, written)
        )
    return True


def step_fields(report: StepReport, started: datetime, written: datetime) -> dict[str, Any]:
    return {
        "started_at": started,
        "written_at": written,
        "seconds": report.seconds,
        "policy_version": report.policy_version,
        "episodes": report.episodes,
        "tokens": report.tokens,
        "reward_mean": report.reward_mean,
        "reward_std": report.reward_std,
        "generated_tokens": report.generated_tokens,
        "finished_train": report.finished_train,
        "finished_eval": report.finished_eval,
        "failed": report.failed,
        "cancelled": report.cancelled,
        "dropped_groups": report.dropped_groups,
        "cap": report.cap,
        "inflight": report.inflight,
        "path": report.path,
    }


def insert_eval(run_id: int, report: EvalReport, started: datetime, finished: datetime) -> None:
    EvalRecord.objects.update_or_create(
        run_id=run_id,
        wave=report.wave,
        defaults={
            "after_step": report.after_step,
            "policy_version": report.policy_version,
            "started_at": started,
            "finished_at": finished,
            "episodes": dict(report.episodes),
            "failed": dict(report.failed),
            "reward_mean": dict(report.reward_mean),
        },
    )


def insert_eval_start(run_id: int, start: WaveStart, started: datetime) -> None:
    """A wave as it starts, unfinished (no ``finished_at``) until its report replaces it."""
    EvalRecord.objects.update_or_create(
        run_id=run_id,
        wave=start.wave,
        defaults={
            "after_step": start.after_step,
            "policy_version": start.policy_version,
            "started_at": started,
            "finished_at": None,
            "episodes": {},
            "failed": {},
            "reward_mean": {},
        },
    )


def open_waves(run_id: int) -> tuple[OpenWave, ...]:
    """Waves started and never finished: the host stopped or died while they ran."""
    rows = EvalRecord.objects.filter(run_id=run_id, finished_at__isnull=True).order_by("wave")
    return tuple(
        OpenWave(number, after_step, version)
        for number, after_step, version in rows.values_list("wave", "after_step", "policy_version")
    )


def pending_overrides(run_id: int) -> list[Override]:
    return list(Override.objects.filter(run_id=run_id, applied_at__isnull=True, error=""))


def settle_override(override_id: int, *, decision_id: int | None = None, error: str = "") -> None:
    Override.objects.filter(pk=override_id).update(
        applied_at=timezone.now() if not error else None, decision_id=decision_id, error=error
    )


def acked_version(run_id: int, step: int) -> int | None:
    return (
        StepRecord.objects.filter(run_id=run_id, step=step, acked_at__isnull=False)
        .values_list("acked_version", flat=True)
        .first()
    )


def record_engine_health(health: dict[str, dict[str, Any]]) -> None:
    """The last poll's view of each registered engine, by name."""
    now = timezone.now()
    for name, figures in health.items():
        Engine.objects.filter(name=name).update(last_health=figures, last_seen_at=now)


def recover_steps(run_id: int, owner: str, steps_dir: Path, written: Iterable[int]) -> int:
    """Records for steps on disk that the database never heard of (the worker died between
    the two writes), rebuilt from the report in each step's folder; the last step recorded
    afterwards.

    The report's times are the dead process's monotonic clock, meaningless here: the record
    is dated by the report file's modification time (it is written just before the folder's
    rename) and starts ``seconds`` before it. A folder without a readable report (written by
    a version before reports) is rebuilt from its samples alone, its other figures 0, and
    the log says so."""
    known = set(StepRecord.objects.filter(run_id=run_id).values_list("step", flat=True))
    for step in sorted(set(written) - known):
        folder = steps_dir / f"{step:06d}"
        try:
            report, started, finished = _stored_report(folder)
        except (OSError, ValueError, TypeError, KeyError) as unreadable:
            logger.warning(
                "store: step %d of run %d has no readable report (%s); its record is rebuilt "
                "from its samples, its timings, cap and episode counts recorded as 0",
                step,
                run_id,
                unreadable,
            )
            report, started, finished = _report_from_samples(step, folder)
        StepRecord.objects.create(
            run_id=run_id, step=step, **step_fields(report, started, finished)
        )
    last = max(known | set(written), default=0)
    save_run(run_id, owner, step=last)
    return last


def _stored_report(folder: Path) -> tuple[StepReport, datetime, datetime]:
    path = folder / REPORT
    stored = json.loads(path.read_text())
    report = StepReport(**{f.name: stored[f.name] for f in dataclasses.fields(StepReport)})
    written = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return (
        dataclasses.replace(report, path=str(folder)),
        written - timedelta(seconds=report.seconds),
        written,
    )


def _report_from_samples(step: int, folder: Path) -> tuple[StepReport, datetime, datetime]:
    lines = (folder / "samples.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines if line]
    rewards = [s["reward"] for s in samples]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5 if rewards else 0.0
    report = StepReport(
        step=step,
        started_at=0.0,
        written_at=0.0,
        policy_version=max((s["policy_version"] for s in samples), default=0),
        episodes=len(samples),
        tokens=sum(s["generated_tokens"] for s in samples),
        reward_mean=mean,
        reward_std=std,
        generated_tokens=0,
        finished_train=0,
        finished_eval=0,
        failed=0,
        cancelled=0,
        dropped_groups=0,
        cap=0,
        inflight=0,
        path=str(folder),
    )
    now = timezone.now()
    return report, now, now
