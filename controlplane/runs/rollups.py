"""Compaction of engine samples into rollups, and retention of raw samples (PostgreSQL).

A run polls each engine every 5 s: ten million rows in a long run, too many to downsample on
each request. So each run's samples older than PACER_ROLLUP_LAG_S are summed, per engine, into
whole bins of 60 s (from raw samples), 10 min and 1 h (from the 60 s bins): one
``INSERT ... SELECT ... GROUP BY ... ON CONFLICT DO UPDATE`` per chunk of PACER_ROLLUP_CHUNK_S,
in the same transaction as the tier's watermark (RollupWatermark.until, aligned to the tier).
Every chunk covers whole bins and replaces them, so compacting again changes nothing; a
watermark row is locked with SKIP LOCKED, so of several workers' sweeps one does each run.

Raw samples older than PACER_SAMPLE_RETENTION_S are deleted, but never above the lowest
tier's watermark: nothing is deleted before it is rolled up. ``Run.samples_pruned_before``
records how far, so a read at a finer step than the rollups can say why it is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import NotSupportedError, connection, transaction
from django.db.models import Exists, Min, OuterRef, Q
from django.utils import timezone

from controlplane.runs.models import EngineSample, RollupWatermark, Run, SampleRollup

TIERS_S = (60, 600, 3600)  # each divides the next, so a coarser tier sums the finest one's bins
FINEST_S = TIERS_S[0]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# (rollup column, from raw samples, from the finest tier's rollups): sums and counts, so a
# mean is exact however bins are added up; as the samples endpoint reads raw samples.
_COLUMNS = (
    ("samples", "COUNT(*)", "SUM(samples)"),
    ("kv_usage_sum", "SUM(kv_usage)", "SUM(kv_usage_sum)"),
    ("kv_usage_max", "MAX(kv_usage)", "MAX(kv_usage_max)"),
    ("num_running_sum", "SUM(num_running)", "SUM(num_running_sum)"),
    ("num_waiting_sum", "SUM(num_waiting)", "SUM(num_waiting_sum)"),
    ("num_waiting_capacity_sum", "COALESCE(SUM(num_waiting_capacity), 0)",
     "SUM(num_waiting_capacity_sum)"),
    ("num_waiting_capacity_count", "COUNT(num_waiting_capacity)",
     "SUM(num_waiting_capacity_count)"),
    ("inflight_train_sum", "SUM(inflight_train)", "SUM(inflight_train_sum)"),
    ("inflight_eval_sum", "SUM(inflight_eval)", "SUM(inflight_eval_sum)"),
    ("num_preemptions_sum", "SUM(num_preemptions)", "SUM(num_preemptions_sum)"),
    ("generation_tokens_sum", "SUM(generation_tokens)", "SUM(generation_tokens_sum)"),
    ("prefix_cache_hits_sum", "SUM(prefix_cache_hits)", "SUM(prefix_cache_hits_sum)"),
    ("prefix_cache_queries_sum", "SUM(prefix_cache_queries)", "SUM(prefix_cache_queries_sum)"),
    ("interval_s_sum", "COALESCE(SUM(interval_s), 0)", "SUM(interval_s_sum)"),
    ("staleness_s_max", "MAX(staleness_s)", "MAX(staleness_s_max)"),
    ("not_up", "COUNT(*) FILTER (WHERE health <> 'up')", "SUM(not_up)"),
    ("restarts", "COUNT(*) FILTER (WHERE restarted)", "SUM(restarts)"),
)  # fmt: skip


def _upsert_sql(source_table: str, source_time: str, from_raw: bool, where: str) -> str:
    names = ", ".join(name for name, _, _ in _COLUMNS)
    values = ", ".join(raw if from_raw else rolled for _, raw, rolled in _COLUMNS)
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name, _, _ in _COLUMNS)
    # The bin as the samples endpoint's EpochBin computes it (a float step), so both agree.
    start = f"to_timestamp(FLOOR(EXTRACT(EPOCH FROM {source_time}) / %(tier)s) * %(tier)s)"
    return (
        f"INSERT INTO {SampleRollup._meta.db_table} (run_id, engine_id, tier_s, start, {names}) "
        f"SELECT run_id, engine_id, %(tier_s)s, {start}, {values} FROM {source_table} "
        f"WHERE run_id = %(run)s AND {where} "
        f"AND {source_time} >= %(begin)s AND {source_time} < %(end)s "
        f"GROUP BY run_id, engine_id, 4 "
        f"ON CONFLICT (run_id, engine_id, tier_s, start) DO UPDATE SET {updates}"
    )


_FROM_RAW = _upsert_sql(EngineSample._meta.db_table, "at", True, "TRUE")
_FROM_FINEST = _upsert_sql(SampleRollup._meta.db_table, "start", False, "tier_s = %(source)s")


def floor_to(moment: datetime, tier_s: int) -> datetime:
    """The start of the ``tier_s`` bin holding ``moment`` (exact: integer microseconds)."""
    return EPOCH + ((moment - EPOCH) // timedelta(seconds=tier_s)) * timedelta(seconds=tier_s)


def ceil_to(moment: datetime, tier_s: int) -> datetime:
    floored = floor_to(moment, tier_s)
    return floored if floored == moment else floored + timedelta(seconds=tier_s)


@dataclass
class Compacted:
    """What one compaction of a run did: rollup rows written per tier, raw samples deleted,
    the watermarks after it, and whether it caught up (False: the deadline stopped it, or
    another worker holds the run)."""

    run_id: int
    rows: dict[int, int] = field(default_factory=dict)
    deleted: int = 0
    until: dict[int, datetime | None] = field(default_factory=dict)
    caught_up: bool = True


def compactable_runs() -> list[int]:
    """Runs with raw samples left: ended runs drop out once retention has deleted theirs."""
    raw = EngineSample.objects.filter(run=OuterRef("pk"))
    return list(Run.objects.filter(Exists(raw)).order_by("pk").values_list("pk", flat=True))


def compact_all(
    *,
    now: datetime | None = None,
    deadline: float | None = None,
    on_run: Callable[[Compacted], None] | None = None,
) -> list[Compacted]:
    """Compact every run that has raw samples, until ``deadline`` (time.monotonic())."""
    done = []
    for run_id in compactable_runs():
        if deadline is not None and time.monotonic() >= deadline:
            break
        report = compact_run(run_id, now=now, deadline=deadline)
        if on_run is not None:
            on_run(report)
        done.append(report)
    return done


Progress = Callable[[int, int, datetime, int], None]  # run id, tier, watermark, rows written


def compact_run(
    run_id: int,
    *,
    now: datetime | None = None,
    deadline: float | None = None,
    progress: Progress | None = None,
) -> Compacted:
    """Roll the run's samples up to ``now - PACER_ROLLUP_LAG_S`` at each tier, finest first
    (coarser tiers are summed from it), then delete raw samples retention lets go.
    ``progress`` hears of each chunk written."""
    if connection.vendor != "postgresql":
        raise NotSupportedError("sample rollups need PostgreSQL")
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.PACER_ROLLUP_LAG_S)
    report = Compacted(run_id)
    RollupWatermark.objects.bulk_create(
        [RollupWatermark(run_id=run_id, tier_s=tier) for tier in TIERS_S], ignore_conflicts=True
    )
    for tier in TIERS_S:
        report.rows[tier] = 0
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                report.caught_up = False
                break
            step = _advance(run_id, tier, cutoff)
            if step is None:
                report.caught_up = False
                break
            rows, until, more = step
            report.rows[tier] += rows
            report.until[tier] = until
            if progress is not None and rows and until is not None:
                progress(run_id, tier, until, rows)
            if not more:
                break
    if report.caught_up:
        report.deleted = _prune(run_id, now, deadline)
    return report


def _advance(run_id: int, tier: int, cutoff: datetime) -> tuple[int, datetime | None, bool] | None:
    """One chunk of one tier in one transaction: (rows written, the watermark, more to do);
    None when another worker holds this tier's watermark."""
    with transaction.atomic():
        mark = (
            RollupWatermark.objects.select_for_update(skip_locked=True)
            .filter(run_id=run_id, tier_s=tier)
            .first()
        )
        if mark is None:
            return None
        limit = floor_to(cutoff, tier)
        if tier != FINEST_S:
            finest = RollupWatermark.objects.get(run_id=run_id, tier_s=FINEST_S).until
            if finest is None:
                return 0, mark.until, False
            limit = min(limit, floor_to(finest, tier))
        first = _first_source_time(run_id, tier, mark.until)
        if first is None or floor_to(first, tier) >= limit:
            if mark.until is None or mark.until < limit:
                mark.until = limit
                mark.save(update_fields=["until"])
            return 0, mark.until, False
        begin = floor_to(first, tier)
        chunk = max(tier, int(settings.PACER_ROLLUP_CHUNK_S) // tier * tier)
        end = min(begin + timedelta(seconds=chunk), limit)
        sql = _FROM_RAW if tier == FINEST_S else _FROM_FINEST
        params = {"run": run_id, "tier": float(tier), "tier_s": tier, "begin": begin, "end": end}
        with connection.cursor() as cursor:
            cursor.execute(sql, {**params, "source": FINEST_S})
            rows = cursor.rowcount
        mark.until = end
        mark.save(update_fields=["until"])
        return rows, end, end < limit


def _first_source_time(run_id: int, tier: int, since: datetime | None) -> datetime | None:
    """The first time at or after ``since`` with something to roll up into ``tier``: gaps
    (a paused run) are skipped in one indexed lookup instead of a chunk at a time."""
    if tier == FINEST_S:
        rows = EngineSample.objects.filter(run_id=run_id)
        if since is not None:
            rows = rows.filter(at__gte=since)
        return rows.aggregate(first=Min("at"))["first"]
    rolled = SampleRollup.objects.filter(run_id=run_id, tier_s=FINEST_S)
    if since is not None:
        rolled = rolled.filter(start__gte=since)
    return rolled.aggregate(first=Min("start"))["first"]


def prune_bound(now: datetime, watermarks: Iterable[datetime | None]) -> datetime | None:
    """Raw samples before this may go: older than the retention and rolled up at every tier
    (so a read at any tier finds every bin below its watermark in the rollups)."""
    marks = list(watermarks)
    if not marks or any(mark is None for mark in marks):
        return None
    keep_from = now - timedelta(seconds=settings.PACER_SAMPLE_RETENTION_S)
    return floor_to(min(keep_from, *marks), FINEST_S)  # type: ignore[type-var]


def _prune(run_id: int, now: datetime, deadline: float | None) -> int:
    """Delete the run's raw samples below ``prune_bound`` a chunk at a time. The run's
    ``samples_pruned_before`` moves first, so a read that sees the rows gone sees it too."""
    marks = RollupWatermark.objects.filter(run_id=run_id).values_list("until", flat=True)
    bound = prune_bound(now, marks)
    if bound is None:
        return 0
    chunk = timedelta(seconds=max(FINEST_S, settings.PACER_ROLLUP_CHUNK_S))
    deleted = 0
    # After the first chunk each starts where the last ended: an index scan from the run's
    # first sample would walk every row deleted before it (dead until a vacuum), each time.
    done_until: datetime | None = None
    while deadline is None or time.monotonic() < deadline:
        old = EngineSample.objects.filter(run_id=run_id, at__lt=bound)
        if done_until is not None:
            old = old.filter(at__gte=done_until)
        first = old.aggregate(first=Min("at"))["first"]
        if first is None:
            break
        end = min(floor_to(first, FINEST_S) + chunk, bound)
        behind = Q(samples_pruned_before__isnull=True) | Q(samples_pruned_before__lt=end)
        Run.objects.filter(behind, pk=run_id).update(samples_pruned_before=end)
        count, _ = old.filter(at__lt=end).delete()
        deleted += count
        done_until = end
    return deleted
