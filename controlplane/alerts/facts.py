"""What the conditions are judged on, read from the database: the runs a rule covers, their
recent engine polls, steps, pins and reconcile alerts.

Bounded reads: runs running now or ended within ``ENDED_WITHIN_S``, and polls within a
window just longer than the longest condition that reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Max, Q

from controlplane.alerts.conditions import Poll, RunFacts, Thresholds
from controlplane.runs.models import (
    Decision,
    EngineSample,
    Override,
    OverrideMode,
    Run,
    RunState,
    StepRecord,
)
from workers.core.decisions import DecisionKind

# A run that ended is told once, within this long of its end (a watcher that was down longer
# misses it rather than telling of runs that ended days ago when it starts).
ENDED_WITHIN_S = 600.0
# Polls read per engine beyond the thresholds: the five most recent at the default period.
POLL_SLACK_S = 25.0


def window_s(limits: Iterable[Thresholds]) -> float:
    """How far back polls are read: past the longest down time and storm any rule asks."""
    longest = max(
        (max(t.engine_down_s, t.storm_polls * 5.0) for t in limits),
        default=0.0,
    )
    return longest + POLL_SLACK_S


def runs_to_watch(now: datetime, run_ids: set[int] | None) -> list[Run]:
    """Running runs, and runs that ended lately; only ``run_ids`` unless None."""
    ended_since = now - timedelta(seconds=ENDED_WITHIN_S)
    query = Run.objects.filter(
        Q(state=RunState.RUNNING) | Q(state__in=RunState.ended(), finished_at__gte=ended_since)
    )
    if run_ids is not None:
        query = query.filter(pk__in=run_ids)
    return list(query.only("id", "name", "state", "error", "step", "started_at"))


def run_facts(run: Run, now: datetime, window: float) -> RunFacts:
    since = now - timedelta(seconds=window)
    polls = [
        Poll(s.at, s.engine_id, s.health, s.num_preemptions, s.interval_s)
        for s in EngineSample.objects.filter(run=run, at__gte=since).only(
            "at", "engine_id", "health", "num_preemptions", "interval_s"
        )
    ]
    last_step_at = StepRecord.objects.filter(run=run).aggregate(at=Max("written_at"))["at"]
    pin_expires_at, pin_cap = _pin(run)
    reconcile = (
        Decision.objects.filter(run=run, kind=DecisionKind.RECONCILE.value, alert=True)
        .order_by("-at")
        .only("at", "reason")
        .first()
    )
    return RunFacts(
        run_id=run.pk,
        name=run.name,
        state=run.state,
        error=run.error,
        step=run.step,
        started_at=run.started_at,
        last_step_at=last_step_at,
        polls=polls,
        pin_expires_at=pin_expires_at,
        pin_cap=pin_cap,
        last_reconcile_at=None if reconcile is None else reconcile.at,
        last_reconcile_reason="" if reconcile is None else reconcile.reason,
    )


def _pin(run: Run) -> tuple[datetime | None, int | None]:
    """When the run's pin lapses, by the last pin or release it applied: a pin's time counts
    from when it was applied (a host's downtime aside, which a restore ages it by)."""
    last = (
        Override.objects.filter(
            run=run,
            mode__in=(OverrideMode.PIN, OverrideMode.RELEASE),
            applied_at__isnull=False,
            error="",
        )
        .order_by("-applied_at")
        .first()
    )
    if last is None or last.mode != OverrideMode.PIN or last.ttl_s is None:
        return None, None
    assert last.applied_at is not None
    return last.applied_at + timedelta(seconds=last.ttl_s), last.cap
