"""What a run's host reads from and writes to the database. Plain synchronous ORM calls, run
in the host's own database thread (Django's ORM is not for the event loop).

Every write is fenced on the run's lease (``fenced``): it runs in a transaction that first
locks the run's row and checks that this host still owns an unexpired lease, so another host
cannot take the lease while the write is under way, and a host that lost it (stalled past its
TTL, its database connection hung) writes nothing: the write raises ``LeaseLost`` instead.
A check before the write and the write in separate statements would leave a gap in which the
lease changes hands; the row lock closes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from controlplane.runs.models import (
    Decision as DecisionRow,
)
from controlplane.runs.models import (
    Engine,
    EngineSample,
    EvalRecord,
    Override,
    OverrideMode,
    Run,
    RunState,
    StepRecord,
)
from workers.core.decisions import Decision
from workers.core.orchestrator.batches import EvalReport, StepReport, WaveStart
from workers.core.orchestrator.orchestrator import OpenWave
from workers.core.orchestrator.ports import Ack
from workers.runtime.batch_files import REPORT

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


# The lease this thread's transaction checked and locked: the writes inside it need no check
# of their own (each would take another savepoint, SET and SELECT ... FOR UPDATE).
_holding = threading.local()


class LeaseLost(Exception):
    """The run's lease is not this host's (any more): nothing was written."""


@contextlib.contextmanager
def under_lease(run_id: int, owner: str) -> Iterator[None]:
    """A transaction in which ``owner`` holds the run's unexpired lease, the run's row locked
    until it ends; ``LeaseLost`` (and nothing written) when it does not. On SQLite the
    transaction is IMMEDIATE (settings), which locks the whole database instead."""
    if getattr(_holding, "lease", None) == (run_id, owner):
        yield  # inside a transaction that checked and locked it already (a reporter's flush)
        return
    with transaction.atomic():
        if not _lock_run(run_id, owner, unexpired=True):
            raise LeaseLost(f"run {run_id}: the lease is not held by {owner}")
        _holding.lease = (run_id, owner)
        try:
            yield
        finally:
            _holding.lease = None


def _lock_run(run_id: int, owner: str, *, unexpired: bool) -> bool:
    """Lock the run's row for the transaction under way if ``owner`` holds its lease
    (``unexpired``: a lease not yet expired). On PostgreSQL the transaction is also ended by
    the server should it idle past PACER_LOCK_IDLE_TIMEOUT_S (a host whose connection hung
    mid-transaction must not keep the lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SET LOCAL idle_in_transaction_session_timeout = %s",
                [f"{settings.PACER_LOCK_IDLE_TIMEOUT_S}s"],
            )
    held = Run.objects.select_for_update().filter(pk=run_id, lease_owner=owner)
    if unexpired:
        held = held.filter(lease_expires_at__gt=timezone.now())
    return bool(list(held.values_list("pk", flat=True)))


def fenced(write: Callable[Concatenate[int, str, P], R]) -> Callable[Concatenate[int, str, P], R]:
    """``write(run_id, owner, ...)`` under the run's lease (``under_lease``)."""

    @functools.wraps(write)
    def guarded(run_id: int, owner: str, *args: P.args, **kwargs: P.kwargs) -> R:
        with under_lease(run_id, owner):
            return write(run_id, owner, *args, **kwargs)

    return guarded


def load_run(run_id: int) -> Run | None:
    return Run.objects.filter(pk=run_id).first()


@fenced
def save_run(run_id: int, owner: str, **fields: Any) -> None:
    Run.objects.filter(pk=run_id).update(**fields)


@fenced
def insert_decisions(
    run_id: int, owner: str, step: int, decisions: Sequence[tuple[Decision, datetime]]
) -> list[int]:
    """The decisions, each marked with the host that made it."""
    rows = DecisionRow.objects.bulk_create(
        [decision_row(run_id, step, decision, at, host=owner) for decision, at in decisions]
    )
    return [row.pk for row in rows]


def decision_row(
    run_id: int, step: int, decision: Decision, at: datetime, *, host: str = ""
) -> DecisionRow:
    return DecisionRow(
        run_id=run_id,
        host=host,
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
        engine=decision.engine,
    )


@fenced
def insert_samples(run_id: int, owner: str, rows: Sequence[EngineSample]) -> None:
    EngineSample.objects.bulk_create(rows)


@fenced
def insert_step(
    run_id: int, owner: str, report: StepReport, started: datetime, written: datetime
) -> None:
    """The step's record and the run's position, in one transaction: a resumed run starts
    after the last step recorded here."""
    Run.objects.filter(pk=run_id).update(step=report.step, host_failures=0)
    StepRecord.objects.update_or_create(
        run_id=run_id, step=report.step, defaults=step_fields(report, started, written)
    )


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
        "sampled_versions": report.sampled_versions,
    }


@fenced
def insert_eval(
    run_id: int, owner: str, report: EvalReport, started: datetime, finished: datetime
) -> None:
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


@fenced
def count_host_failure(run_id: int, owner: str) -> int:
    """One more hosting of the run ended in an unexpected error: how many in a row now."""
    Run.objects.filter(pk=run_id).update(host_failures=F("host_failures") + 1)
    return Run.objects.values_list("host_failures", flat=True).get(pk=run_id)


def end_run(
    run_id: int, owner: str, state: RunState, error: str, ending: Sequence[int], **fields: Any
) -> RunState | None:
    """Release the lease with the run's new state and settle the pause and stop commands
    ``ending`` it, in one transaction; the state written, or None when the lease was not
    ours any more (nothing written then).

    A run handed back to the queue (its worker shutting down) with a stop or a pause stored
    and not settled ends as that command asks instead, whether this host applied it too late
    to end the run by it or never saw it: marking it applied and queueing the run would lose
    it, and the next worker would run the run on."""
    now = timezone.now()
    with transaction.atomic():
        if not _lock_run(run_id, owner, unexpired=False):
            return None
        settled = Override.objects.filter(pk__in=list(ending), run_id=run_id)
        if state == RunState.QUEUED:
            commands = Override.objects.filter(
                run_id=run_id,
                mode__in=(OverrideMode.STOP, OverrideMode.PAUSE),
                applied_at__isnull=True,
                error="",
            )
            modes = set(commands.values_list("mode", flat=True))
            if modes:
                state = RunState.CANCELLED if OverrideMode.STOP in modes else RunState.PAUSED
                settled = commands
        ended = state in RunState.ended()
        Run.objects.filter(pk=run_id).update(
            lease_owner="",
            lease_expires_at=None,
            state=state,
            error=error,
            finished_at=now if ended else None,
            **fields,
        )
        settled.update(applied_at=now)
    return state


@fenced
def insert_eval_start(run_id: int, owner: str, start: WaveStart, started: datetime) -> None:
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


@fenced
def settle_override(
    run_id: int, owner: str, override_id: int, *, decision_id: int | None = None, error: str = ""
) -> None:
    Override.objects.filter(pk=override_id, run_id=run_id).update(
        applied_at=timezone.now() if not error else None, decision_id=decision_id, error=error
    )


def acked(run_id: int, step: int) -> Ack | None:
    """The trainer's acknowledgement of ``step``, as the REST API stored (and checked) it."""
    row = (
        StepRecord.objects.filter(run_id=run_id, step=step, acked_at__isnull=False)
        .values_list("acked_version", "acked_checkpoint")
        .first()
    )
    return None if row is None else Ack(row[0], row[1] or None)


def last_checkpoint(run_id: int) -> str | None:
    """The checkpoint of the run's latest acknowledgement: the weights its policy version is
    on, for a host that takes the run over (the latest step may be waiting for its ack)."""
    checkpoint = (
        StepRecord.objects.filter(run_id=run_id, acked_at__isnull=False)
        .order_by("-step")
        .values_list("acked_checkpoint", flat=True)
        .first()
    )
    return checkpoint or None


@fenced
def record_engine_health(run_id: int, owner: str, health: dict[str, dict[str, Any]]) -> None:
    """The last poll's view of each registered engine, by name."""
    now = timezone.now()
    for name, figures in health.items():
        Engine.objects.filter(name=name).update(last_health=figures, last_seen_at=now)


@fenced
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
    Run.objects.filter(pk=run_id).update(step=last)
    return last


def _defaulted(field: dataclasses.Field[Any]) -> bool:
    return (
        field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    )


def _stored_report(folder: Path) -> tuple[StepReport, datetime, datetime]:
    path = folder / REPORT
    stored = json.loads(path.read_text())
    # A report written before a field existed gives that field's default.
    report = StepReport(
        **{
            f.name: stored[f.name]
            for f in dataclasses.fields(StepReport)
            if f.name in stored or not _defaulted(f)
        }
    )
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
